package eventpack

import (
	"container/list"
	"sync"
)

// DictCache keeps the dictionary bytes of rows that no longer change (the
// rows of ended turns, without what may change: see rowBytes), so that a
// replay of a recent turn needs no read of its rows. It holds at most its
// budget of bytes, the least recently used out first. A stale entry
// cannot go unnoticed: a body decoded against other bytes than it was
// encoded against fails its checksum (ErrRowsChanged), and the caller
// drops the entries and reads the rows.
type DictCache struct {
	budget int

	mu    sync.Mutex // guards the following
	size  int
	order *list.List // of *cacheEntry, most recently used first
	byKey map[cacheKey]*list.Element
}

type cacheKey struct {
	tenant string
	ref    Ref
}

type cacheEntry struct {
	key   cacheKey
	bytes []byte
}

// NewDictCache returns a cache of at most budget bytes.
func NewDictCache(budget int) *DictCache {
	return &DictCache{budget: budget, order: list.New(), byKey: map[cacheKey]*list.Element{}}
}

// Clear empties the cache (tests and benchmarks of reads from the rows).
func (c *DictCache) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.size, c.order, c.byKey = 0, list.New(), map[cacheKey]*list.Element{}
}

// Has reports whether the cache holds ref's bytes.
func (c *DictCache) Has(tenant string, ref Ref) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.byKey[cacheKey{tenant, ref}]
	return ok
}

func (c *DictCache) get(tenant string, ref Ref) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[cacheKey{tenant, ref}]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cacheEntry).bytes, true
}

// Put keeps b as ref's bytes (b is not copied: it must not change).
func (c *DictCache) Put(tenant string, ref Ref, b []byte) {
	if len(b) > c.budget/8 {
		return // one row would push out too much
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey{tenant, ref}
	if e, ok := c.byKey[k]; ok {
		c.size -= len(e.Value.(*cacheEntry).bytes)
		c.order.Remove(e)
	}
	c.byKey[k] = c.order.PushFront(&cacheEntry{key: k, bytes: b})
	c.size += len(b)
	for c.size > c.budget {
		last := c.order.Back()
		ent := last.Value.(*cacheEntry)
		c.order.Remove(last)
		delete(c.byKey, ent.key)
		c.size -= len(ent.bytes)
	}
}

// Drop forgets ref's bytes.
func (c *DictCache) Drop(tenant string, ref Ref) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey{tenant, ref}
	if e, ok := c.byKey[k]; ok {
		c.size -= len(e.Value.(*cacheEntry).bytes)
		c.order.Remove(e)
		delete(c.byKey, k)
	}
}

// Source returns a Source that answers from the cache, else from rows,
// keeping what rows gave.
func (c *DictCache) Source(tenant string, rows Source) Source {
	return cachedSource{c: c, tenant: tenant, rows: rows}
}

type cachedSource struct {
	c      *DictCache
	tenant string
	rows   Source
}

func (s cachedSource) RowBytes(dst []byte, ref Ref) ([]byte, error) {
	if b, ok := s.c.get(s.tenant, ref); ok {
		return append(dst, b...), nil
	}
	n := len(dst)
	dst, err := s.rows.RowBytes(dst, ref)
	if err == nil {
		s.c.Put(s.tenant, ref, append([]byte(nil), dst[n:]...))
	}
	return dst, err
}
