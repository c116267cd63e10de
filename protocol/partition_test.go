package protocol

import (
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMurmur2KafkaVectors pins Murmur2 to the values Kafka's own tests
// give (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java,
// testMurmur2), as Java ints.
func TestMurmur2KafkaVectors(t *testing.T) {
	for key, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := int32(Murmur2([]byte(key))); got != want {
			t.Errorf("Murmur2(%q) = %d, Kafka's is %d", key, got, want)
		}
	}
}

// TestKeyPartitionAsKafkaClients: a keyed message's partition is the one
// franz-go's default partitioner (Kafka's: murmur2 of the key) picks, for
// keys of every length up to 40 with bytes over 0x7f among them, and
// every partition count up to 64.
func TestKeyPartitionAsKafkaClients(t *testing.T) {
	p := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		key := make([]byte, i%41)
		for j := range key {
			key[j] = byte(rng.UintN(256))
		}
		n := 1 + i%64
		if got, want := KeyPartition(key, n), p.Partition(&kgo.Record{Key: key}, n); got != want {
			t.Fatalf("key %x, %d partitions: partition %d, franz-go's %d", key, n, got, want)
		}
	}
}
