package storage

import (
	"container/list"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// fileCache keeps read-only handles of segment files open between reads,
// at most max of them when idle. A handle in use by a read is reference
// counted and closed only once released, even if evicted or invalidated
// meanwhile, so a span's descriptor stays valid for sendfile.
type fileCache struct {
	fs      FS
	enabled bool
	max     int
	budget  *fileBudget // counts every handle open, cached or not

	mu    sync.Mutex
	files map[string]*cachedFile
	lru   list.List // of *cachedFile, most recently used first
}

type cachedFile struct {
	path   string
	f      File
	refs   int           // fileCache.mu must be held
	elem   *list.Element // nil once out of the cache
	cached bool
}

func newFileCache(fsys FS, enabled bool, max int, budget *fileBudget) *fileCache {
	c := &fileCache{fs: fsys, enabled: enabled, max: max, budget: budget, files: make(map[string]*cachedFile)}
	budget.cache = c
	return c
}

// closeFile closes a handle the cache opened.
func (c *fileCache) closeFile(f File) {
	f.Close()
	c.budget.used.Add(-1)
}

// acquire returns an open handle of path; release it when done.
func (c *fileCache) acquire(path string) (*cachedFile, error) {
	if c.enabled {
		c.mu.Lock()
		if cf, ok := c.files[path]; ok {
			cf.refs++
			c.lru.MoveToFront(cf.elem)
			c.mu.Unlock()
			return cf, nil
		}
		c.mu.Unlock()
	}
	f, err := c.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	c.budget.used.Add(1)
	cf := &cachedFile{path: path, f: f, refs: 1}
	if !c.enabled {
		return cf, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if other, ok := c.files[path]; ok {
		// Another reader opened it meanwhile: use theirs.
		other.refs++
		c.lru.MoveToFront(other.elem)
		c.closeFile(f)
		return other, nil
	}
	cf.cached = true
	cf.elem = c.lru.PushFront(cf)
	c.files[path] = cf
	c.evictLocked()
	return cf, nil
}

// release drops one reference, closing the file if it left the cache.
func (c *fileCache) release(cf *cachedFile) {
	c.mu.Lock()
	cf.refs--
	closeIt := cf.refs == 0 && !cf.cached
	if cf.refs == 0 && cf.cached {
		c.evictLocked()
	}
	c.mu.Unlock()
	if closeIt {
		c.closeFile(cf.f)
	}
}

// evictLocked closes idle handles beyond max, and while the store is over
// its file budget, least recently used first. mu must be held.
func (c *fileCache) evictLocked() {
	e := c.lru.Back()
	for (c.lru.Len() > c.max || c.budget.used.Load() > c.budget.max) && e != nil {
		prev := e.Prev()
		cf := e.Value.(*cachedFile)
		if cf.refs == 0 {
			c.removeLocked(cf)
			c.closeFile(cf.f)
		}
		e = prev
	}
}

// shed closes up to n idle handles, least recently used first, to make
// room in the file budget for write handles.
func (c *fileCache) shed(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.lru.Back(); n > 0 && e != nil; {
		prev := e.Prev()
		if cf := e.Value.(*cachedFile); cf.refs == 0 {
			c.removeLocked(cf)
			c.closeFile(cf.f)
			n--
		}
		e = prev
	}
}

// removeLocked takes cf out of the cache; the caller closes it if idle.
func (c *fileCache) removeLocked(cf *cachedFile) {
	c.lru.Remove(cf.elem)
	cf.elem = nil
	cf.cached = false
	delete(c.files, cf.path)
}

// invalidate drops the given paths (deleted files) from the cache.
func (c *fileCache) invalidate(paths []string) {
	c.mu.Lock()
	var idle []File
	for _, p := range paths {
		if cf, ok := c.files[p]; ok {
			c.removeLocked(cf)
			if cf.refs == 0 {
				idle = append(idle, cf.f)
			}
		}
	}
	c.mu.Unlock()
	for _, f := range idle {
		c.closeFile(f)
	}
}

// invalidateDirs drops every file under the given directories.
func (c *fileCache) invalidateDirs(dirs []string) {
	c.mu.Lock()
	var paths []string
	for p := range c.files {
		for _, d := range dirs {
			if strings.HasPrefix(p, d+string(filepath.Separator)) {
				paths = append(paths, p)
			}
		}
	}
	c.mu.Unlock()
	c.invalidate(paths)
}

// closeAll closes every idle handle and empties the cache.
func (c *fileCache) closeAll() {
	c.mu.Lock()
	paths := make([]string, 0, len(c.files))
	for p := range c.files {
		paths = append(paths, p)
	}
	c.mu.Unlock()
	c.invalidate(paths)
}

// open counts the handles the cache holds, for tests and metrics.
func (c *fileCache) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
