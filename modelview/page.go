package modelview

import "github.com/forge-runtime/forge"

// Page returns the page of view after cursor (the id of the last message
// of the previous page, "" for the first), at most limit messages (100
// when limit is not positive), and the cursor of the next page ("" after
// the last). A cursor that is not in view is ErrInvalid.
func Page(view []*forge.Message, cursor string, limit int) ([]*forge.Message, string, error) {
	start := 0
	if cursor != "" {
		start = -1
		for i, m := range view {
			if m.ID == cursor {
				start = i + 1
				break
			}
		}
		if start < 0 {
			return nil, "", forge.Errorf(forge.ErrInvalid, "cursor %q is not in the current model view", cursor)
		}
	}
	if limit <= 0 {
		limit = 100
	}
	end := min(start+limit, len(view))
	next := ""
	if end < len(view) {
		next = view[end-1].ID
	}
	return view[start:end], next, nil
}
