package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// runFaults: kill -9 cycles that, with the server stopped, damage some of
// the volumes (never every copy of a byte) before the next start.
func runFaults(ctx context.Context, e *env) (string, error) {
	return killCycles(ctx, e, "faults", e.cfg.faults, damageVolumes)
}

// damageVolumes applies one kind of damage per cycle, in turn.
func damageVolumes(e *env, vols []string, cycle int) (string, error) {
	v := e.rnd.IntN(len(vols))
	switch cycle % 5 {
	case 0:
		return "volume removed", os.RemoveAll(vols[v])
	case 1:
		return "segment truncated", truncateSegment(e, vols[v])
	case 2:
		return "bytes flipped", flipBytes(e, vols[v])
	case 3:
		return "indexes deleted", deleteIndexes(vols)
	}
	// Two volumes damaged differently, the third intact.
	w := (v + 1) % len(vols)
	if err := truncateSegment(e, vols[v]); err != nil {
		return "", err
	}
	if err := flipBytes(e, vols[w]); err != nil {
		return "", err
	}
	return "truncated+flipped+indexes deleted", deleteIndexes(vols)
}

// files lists the files of a volume whose names end in ext.
func files(vol, ext string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(vol, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ext) {
			out = append(out, path)
		}
		return nil
	})
	return out, err
}

// randomSegment picks a non-empty segment log of vol.
func randomSegment(e *env, vol string) (string, int64, error) {
	logs, err := files(vol, ".log")
	if err != nil {
		return "", 0, err
	}
	e.rnd.Shuffle(len(logs), func(i, j int) { logs[i], logs[j] = logs[j], logs[i] })
	for _, p := range logs {
		if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
			return p, fi.Size(), nil
		}
	}
	return "", 0, fmt.Errorf("no segment with data on %s", vol)
}

// truncateSegment cuts a random segment of vol at a random length.
func truncateSegment(e *env, vol string) error {
	p, size, err := randomSegment(e, vol)
	if err != nil {
		return err
	}
	return os.Truncate(p, e.rnd.Int64N(size))
}

// flipBytes inverts 16 random bytes of a random segment of vol.
func flipBytes(e *env, vol string) error {
	p, size, err := randomSegment(e, vol)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	for range 16 {
		off := e.rnd.Int64N(size)
		if _, err := f.ReadAt(b, off); err != nil {
			return err
		}
		b[0] = ^b[0]
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
	}
	return f.Close()
}

// deleteIndexes removes every segment index of every volume: the index is
// derived data, rebuilt from the logs.
func deleteIndexes(vols []string) error {
	for _, v := range vols {
		idx, err := files(v, ".idx")
		if err != nil {
			return err
		}
		for _, p := range idx {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	return nil
}
