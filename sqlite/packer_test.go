package sqlite

import "github.com/forge-runtime/forge/internal/eventpack"

func init() {
	forgetDictionaries = func(s *Store) { s.dicts = eventpack.NewDictCache(dictCacheBytes) }
}
