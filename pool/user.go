package pool

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// userKeyLen is the number of HMAC bytes kept in a user key: 128 bits make a
// collision between two users of one deployment practically impossible
// (about 2^-88 for a million users) and keep stored keys at 32 hex digits.
const userKeyLen = 16

// userKey is the keyed hash that stands for an e-mail everywhere (store,
// logs, stats). "" (anonymous) maps to "".
func userKey(hashKey []byte, user string) string {
	u := strings.ToLower(strings.TrimSpace(user))
	if u == "" {
		return ""
	}
	m := hmac.New(sha256.New, hashKey)
	m.Write([]byte(u))
	return hex.EncodeToString(m.Sum(nil)[:userKeyLen])
}

// keyPrefix is the part of a user key that may be logged.
func keyPrefix(key string) string {
	if len(key) > 8 {
		return key[:8]
	}
	return key
}
