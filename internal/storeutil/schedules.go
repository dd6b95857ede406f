package storeutil

import (
	"strconv"
	"time"

	"github.com/forge-runtime/forge"
)

// RunCursor is the cursor after a schedule run: its slot in Unix
// milliseconds (slots have millisecond precision and are unique per
// schedule).
func RunCursor(r *forge.ScheduleRun) string { return strconv.FormatInt(r.Slot.UnixMilli(), 10) }

// ParseRunCursor reads a RunCursor; "" is the Unix epoch, before every
// slot (slots are times after a schedule's creation).
func ParseRunCursor(c string) (time.Time, error) {
	if c == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	ms, err := strconv.ParseInt(c, 10, 64)
	if err != nil {
		return time.Time{}, forge.Errorf(forge.ErrInvalid, "cursor %q is not a cursor of this list", c)
	}
	return time.UnixMilli(ms).UTC(), nil
}
