package migrate

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoadOrdersAndValidates(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"m/0002_b.sql":  {Data: []byte("B")},
		"m/0010_c.sql":  {Data: []byte("C")},
		"m/0001_a.sql":  {Data: []byte("A")},
		"m/README.md":   {Data: []byte("not a migration")},
		"other/9_x.sql": {Data: []byte("elsewhere")},
	}
	ms, err := Load(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.Name+"="+m.SQL)
	}
	if want := []string{"0001_a.sql=A", "0002_b.sql=B", "0010_c.sql=C"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Load = %v, want %v", got, want)
	}
	if Latest(ms) != 10 {
		t.Fatalf("Latest = %d", Latest(ms))
	}

	for name, bad := range map[string]fstest.MapFS{
		"no number":     {"m/init.sql": {}},
		"zero":          {"m/0000_init.sql": {}},
		"no name":       {"m/0001_.sql": {}},
		"duplicate":     {"m/0001_a.sql": {}, "m/01_b.sql": {}},
		"empty":         {"m/x.txt": {}},
		"negative":      {"m/-1_a.sql": {}},
		"not a number":  {"m/00x1_a.sql": {}},
		"missing under": {"m/0001.sql": {}},
	} {
		if _, err := Load(bad, "m"); err == nil {
			t.Errorf("%s: Load accepted it", name)
		}
	}
}

// memTarget is a database as far as the mechanism sees it: the set of
// applied versions.
type memTarget struct {
	applied []int
	ran     []string
	failAt  int
}

func (m *memTarget) Applied(context.Context) ([]int, error) { return m.applied, nil }

func (m *memTarget) Apply(_ context.Context, mg Migration) error {
	if mg.Version == m.failAt {
		return errors.New("boom")
	}
	m.ran = append(m.ran, mg.Name)
	m.applied = append(m.applied, mg.Version)
	return nil
}

func TestUp(t *testing.T) {
	t.Parallel()
	ms := []Migration{{1, "0001_a.sql", ""}, {2, "0002_b.sql", ""}, {3, "0003_c.sql", ""}}
	ctx := context.Background()

	fresh := &memTarget{}
	done, err := Up(ctx, fresh, ms)
	if err != nil || !reflect.DeepEqual(done, []int{1, 2, 3}) {
		t.Fatalf("fresh: %v, %v", done, err)
	}
	again, err := Up(ctx, fresh, ms)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Up applied %v, %v", again, err)
	}

	// A hole (2 missing while 3 is applied) is filled, nothing else rerun.
	holed := &memTarget{applied: []int{1, 3}}
	if done, err := Up(ctx, holed, ms); err != nil || !reflect.DeepEqual(holed.ran, []string{"0002_b.sql"}) {
		t.Fatalf("holed: ran %v (%v), %v", holed.ran, done, err)
	}

	newer := &memTarget{applied: []int{1, 2, 3, 4}}
	if _, err := Up(ctx, newer, ms); !errors.Is(err, ErrTooNew) {
		t.Fatalf("newer schema: %v", err)
	}
	unknown := &memTarget{applied: []int{1, 2}}
	if _, err := Up(ctx, unknown, []Migration{ms[0], ms[2]}); err == nil || !strings.Contains(err.Error(), "does not have") {
		t.Fatalf("unknown applied version: %v", err)
	}

	failing := &memTarget{failAt: 2}
	done, err = Up(ctx, failing, ms)
	if err == nil || !strings.Contains(err.Error(), "0002_b.sql") || !reflect.DeepEqual(done, []int{1}) {
		t.Fatalf("failing: %v, %v", done, err)
	}
}
