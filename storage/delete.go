package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"time"
)

// Deleting a topic: its directories renamed away at once, removed in the
// background.

// DeleteTopic removes a topic and its files from every volume. Reads in
// progress keep their open files until released; waiters are woken. The
// directories are renamed away at once and removed in the background.
func (s *Store) DeleteTopic(name string) error {
	if err := validTopic(name); err != nil {
		return err
	}
	t, done, err := s.takeTopic(name)
	if err != nil {
		return err
	}
	graves, err := s.buryTopic(t, name, done)
	if err != nil {
		return err
	}
	// Every read of the old topic opened its files under t.mu, before the
	// renames: drop them from the cache before the name is free again.
	s.cache.invalidateDirs(t.dirs())
	s.mu.Lock()
	delete(s.busy, name)
	close(done)
	s.mu.Unlock()
	if err := s.syncTopicsDirs(); err != nil {
		return fmt.Errorf("storage: delete topic %q: %w", name, err)
	}
	s.removeLater(name, graves)
	return nil
}

// takeTopic takes topic name out of the map and marks the name busy, with
// done to close once the deletion is over or undone.
func (s *Store) takeTopic(name string) (t *topic, done chan struct{}, err error) {
	if err := s.claim(name); err != nil {
		return nil, nil, err
	}
	t, ok := s.topics[name]
	if !ok {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: %q", ErrTopicNotFound, name)
	}
	// Out of the map, under busy: new lookups miss it and no topic of the
	// same name can be created until the directories are renamed away and
	// the cache forgets its files. s.mu is not held while waiting for the
	// topic's committer, so other topics go on.
	delete(s.topics, name)
	done = make(chan struct{})
	s.busy[name] = done
	s.mu.Unlock()
	return t, done, nil
}

// buryTopic renames the directories of t, taken out by takeTopic, away on
// every volume and marks t deleted, returning the new names. If a rename
// fails, it puts the topic back as it was (directories, map entry) and
// frees the name.
func (s *Store) buryTopic(t *topic, name string, done chan struct{}) ([]string, error) {
	// Rename under t.mu so no read is opening files meanwhile, and under
	// t.index.mu so no queued index is being written into the directories.
	t.wmu.Lock()
	t.committer.quiesce()
	t.index.mu.Lock()
	t.groups.mu.Lock() // no groups file is being written into the directories
	t.mu.Lock()
	graves, err := s.renameAway(name)
	if err != nil {
		t.mu.Unlock()
		t.groups.mu.Unlock()
		t.index.mu.Unlock()
		t.wmu.Unlock()
		s.mu.Lock()
		s.topics[name] = t
		delete(s.busy, name)
		close(done)
		s.mu.Unlock()
		return nil, fmt.Errorf("storage: delete topic %q: %w", name, err)
	}
	t.index.done = true // the directories are gone: no index is written again
	t.mu.Unlock()
	t.groups.mu.Unlock()
	t.closeGroups(fmt.Errorf("%w: %q", ErrTopicNotFound, name)) // its groups go with it
	t.index.mu.Unlock()
	t.markDeleted()
	t.wmu.Unlock()
	return graves, nil
}

// renameAway renames the directory of topic name on every volume to a
// unique deleted-topic name (recovery removes those it finds) and returns
// the new names; a volume without the directory is skipped. If a rename
// fails, it renames back what it renamed, so the topic stays as it was.
func (s *Store) renameAway(name string) ([]string, error) {
	var graves []string
	var err error
	for v := range s.opts.Volumes {
		dir := s.topicDir(v, name)
		grave := filepath.Join(filepath.Dir(dir), deletedPrefix+strconv.FormatInt(time.Now().UnixNano(), 10)+"."+strconv.FormatUint(s.deleted.Add(1), 10))
		if err = s.fs.Rename(dir, grave); err != nil && !errors.Is(err, fs.ErrNotExist) {
			break
		}
		err = nil
		graves = append(graves, grave)
	}
	if err != nil {
		// Put back what was renamed: the topic stays as it was.
		for v, g := range graves {
			if rerr := s.fs.Rename(g, s.topicDir(v, name)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
		return nil, err
	}
	return graves, nil
}

// syncTopicsDirs fsyncs the topics directory of every volume, making
// renames in them durable.
func (s *Store) syncTopicsDirs() error {
	var errs []error
	for v := range s.opts.Volumes {
		errs = append(errs, s.fs.SyncDir(filepath.Join(s.opts.Volumes[v], topicsDir)))
	}
	return errors.Join(errs...)
}

// removeLater removes graves, the renamed directories of deleted topic
// name, in the background, counted in pendingRemovals for WaitDeleted; at
// once if the store is closing, since Close may be waiting already.
func (s *Store) removeLater(name string, graves []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.removeGraves(name, graves)
		return
	}
	// Under s.mu, and only while open, so never after Close began waiting.
	if s.pendingRemovals == 0 {
		s.removing = make(chan struct{})
	}
	s.pendingRemovals++
	go func() {
		s.removeGraves(name, graves)
		s.mu.Lock()
		if s.pendingRemovals--; s.pendingRemovals == 0 {
			close(s.removing)
			s.removing = nil
		}
		s.mu.Unlock()
	}()
}

// removeGraves removes the renamed directories of deleted topic name; a
// failure is only logged.
func (s *Store) removeGraves(name string, graves []string) {
	for _, g := range graves {
		if err := s.fs.RemoveAll(g); err != nil {
			// Renamed away already; recovery removes what is left.
			s.opts.Logger.Warn("removing a deleted topic", "topic", name, "err", err)
		}
	}
}

// WaitDeleted returns once the files of every topic deleted so far are
// removed from the volumes (DeleteTopic removes them in the background),
// or when ctx ends, with its error. Removing a large topic frees its page
// cache and takes CPU: a benchmark waits for it before timing.
func (s *Store) WaitDeleted(ctx context.Context) error {
	s.mu.RLock()
	ch := s.removing
	s.mu.RUnlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
