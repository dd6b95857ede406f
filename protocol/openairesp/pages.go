package openairesp

import (
	"net/http"
	"slices"
	"strconv"
)

// page is a list request's order, limit and cursor, as OpenAI's item
// lists (input_items, conversation items) take them.
type page struct {
	limit int
	desc  bool
	after string
}

// readPage reads ?limit (1 to 100, 20 by default), ?order (desc by
// default) and ?after.
func readPage(r *http.Request) (page, error) {
	q := r.URL.Query()
	p := page{limit: 20, desc: true, after: q.Get("after")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return p, invalid("limit", "limit must be between 1 and 100")
		}
		p.limit = n
	}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		p.desc = false
	default:
		return p, invalid("order", "order must be asc or desc")
	}
	return p, nil
}

// write answers the page of items (given oldest first): after names an
// item of the list, or is a 400.
func (p page) write(w http.ResponseWriter, items []map[string]any) error {
	if p.desc {
		slices.Reverse(items)
	}
	if p.after != "" {
		i := slices.IndexFunc(items, func(it map[string]any) bool { return it["id"] == p.after })
		if i < 0 {
			return invalid("after", "after (%q) names no item of this list", p.after)
		}
		items = items[i+1:]
	}
	more := len(items) > p.limit
	if more {
		items = items[:p.limit]
	}
	out := map[string]any{"object": "list", "data": items, "has_more": more, "first_id": nil, "last_id": nil}
	if len(items) > 0 {
		out["first_id"], out["last_id"] = items[0]["id"], items[len(items)-1]["id"]
	} else {
		out["data"] = []any{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
