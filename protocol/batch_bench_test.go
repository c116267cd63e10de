package protocol

import (
	"fmt"
	"hash/crc32"
	"testing"
)

// BenchmarkValidate measures what storage checks on every appended batch
// (CRC32C of the body and the message walk) beside the CRC alone, for a
// batch of 1000 messages.
func BenchmarkValidate(b *testing.B) {
	for _, size := range []int{100, 1024} {
		msgs := make([][]byte, 1000)
		for i := range msgs {
			msgs[i] = make([]byte, size)
		}
		batch := AppendBatch(nil, msgs...)
		bt, _, err := ParseBatch(batch)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("size=%d/validate", size), func(b *testing.B) {
			b.SetBytes(int64(len(batch)))
			for b.Loop() {
				if err := bt.Validate(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("size=%d/crc-only", size), func(b *testing.B) {
			b.SetBytes(int64(len(batch)))
			tab := crc32.MakeTable(crc32.Castagnoli)
			for b.Loop() {
				crc32.Checksum(bt.Body, tab)
			}
		})
	}
}
