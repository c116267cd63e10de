package storage

import (
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// FS is the small file-system seam storage does all its I/O through. OSFS is
// the real one; tests wrap it to inject failures (a failing fsync, a short
// write) without test flags in the production code.
type FS interface {
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	MkdirAll(path string, perm fs.FileMode) error
	ReadDir(name string) ([]fs.DirEntry, error)
	Rename(oldpath, newpath string) error
	// RenameNoReplace renames oldpath to newpath unless newpath exists, in
	// which case it fails with an error matching fs.ErrExist.
	RenameNoReplace(oldpath, newpath string) error
	Remove(name string) error
	RemoveAll(path string) error
	Stat(name string) (fs.FileInfo, error)
	// SyncDir fsyncs a directory, making creations, renames and removals in
	// it durable.
	SyncDir(path string) error
}

// File is an open file of an FS.
type File interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	// Writev writes bufs one after another at off, all at once where the
	// platform allows (pwritev(2)), and returns the bytes written.
	Writev(bufs [][]byte, off int64) (int, error)
	Truncate(size int64) error
	Sync() error
	Stat() (fs.FileInfo, error)
	// Fd returns the descriptor, for sendfile(2) and flock(2).
	Fd() uintptr
	Close() error
}

// OSFS is the operating system's file system.
type OSFS struct{}

var _ FS = OSFS{}

// OpenFile opens a file with os.OpenFile.
func (OSFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// MkdirAll is os.MkdirAll.
func (OSFS) MkdirAll(path string, perm fs.FileMode) error { return os.MkdirAll(path, perm) }

// ReadDir is os.ReadDir.
func (OSFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }

// Rename is os.Rename.
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// RenameNoReplace is renameat2(2) with RENAME_NOREPLACE. On a file system
// without it, it checks with a Stat first (not atomic, which storage does
// not need: one writer per topic directory).
func (OSFS) RenameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	switch err {
	case nil:
		return nil
	case unix.EINVAL, unix.ENOSYS, unix.EOPNOTSUPP:
		if _, serr := os.Lstat(newpath); serr == nil {
			return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: fs.ErrExist}
		}
		return os.Rename(oldpath, newpath)
	}
	return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
}

// Remove is os.Remove.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// RemoveAll is os.RemoveAll.
func (OSFS) RemoveAll(path string) error { return os.RemoveAll(path) }

// Stat is os.Stat.
func (OSFS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// SyncDir opens the directory and fsyncs it.
func (OSFS) SyncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

type osFile struct{ *os.File }

// maxIovecs is the most buffers one pwritev(2) call takes (IOV_MAX).
const maxIovecs = 1024

func (f osFile) Writev(bufs [][]byte, off int64) (int, error) {
	total := 0
	fd := int(f.File.Fd())
	for len(bufs) > 0 {
		chunk := bufs
		if len(chunk) > maxIovecs {
			chunk = chunk[:maxIovecs]
		}
		want := 0
		for _, b := range chunk {
			want += len(b)
		}
		n, err := unix.Pwritev(fd, chunk, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, &os.PathError{Op: "pwritev", Path: f.Name(), Err: err}
		}
		if n == 0 && want > 0 {
			return total, &os.PathError{Op: "pwritev", Path: f.Name(), Err: io.ErrShortWrite}
		}
		total += n
		off += int64(n)
		if n == want {
			bufs = bufs[len(chunk):]
			continue
		}
		// Short write: drop what was written and go on with the rest.
		bufs = skipBytes(bufs, n)
	}
	return total, nil
}

// skipBytes drops the first n bytes from bufs, copying the slice header list
// only when a buffer is cut.
func skipBytes(bufs [][]byte, n int) [][]byte {
	for n > 0 && len(bufs) > 0 {
		if n >= len(bufs[0]) {
			n -= len(bufs[0])
			bufs = bufs[1:]
			continue
		}
		rest := make([][]byte, len(bufs))
		copy(rest, bufs)
		rest[0] = rest[0][n:]
		return rest
	}
	return bufs
}
