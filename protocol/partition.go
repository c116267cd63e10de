package protocol

// This file: which partition a keyed message goes to, bit for bit as
// Kafka's default partitioner chooses it, so that a key lands on the same
// partition whichever client sent it.

// Murmur2 is the 32-bit MurmurHash2 of b with Kafka's seed (0x9747b28c),
// as Kafka's Utils.murmur2 computes it (Java's int arithmetic, every
// byte taken unsigned).
func Murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	n := len(b) / 4
	for i := range n {
		k := uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := b[4*n:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// KeyPartition returns the partition of partitions (at least 1) that
// Kafka's default partitioner gives a message with key (not nil):
// Murmur2(key) with its sign bit cleared, modulo partitions.
func KeyPartition(key []byte, partitions int) int {
	return int(Murmur2(key)&0x7fffffff) % partitions
}
