package protocol

import "crypto/sha256"

// TokenHash is the hash by which a server knows a token: the SHA-256 of
// its bytes, as sent in a hello. A server keeps only the hashes of the
// tokens it accepts (an auth file holds them in hex), never the tokens.
func TokenHash(token string) [sha256.Size]byte {
	return sha256.Sum256([]byte(token))
}
