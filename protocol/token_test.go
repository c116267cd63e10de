package protocol_test

import (
	"encoding/hex"
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

// TestTokenHash: the SHA-256 of the token's bytes (the known digests of
// "" and "abc").
func TestTokenHash(t *testing.T) {
	for tok, want := range map[string]string{
		"":    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"abc": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	} {
		if h := protocol.TokenHash(tok); hex.EncodeToString(h[:]) != want {
			t.Errorf("TokenHash(%q) = %x, want %s", tok, h, want)
		}
	}
}
