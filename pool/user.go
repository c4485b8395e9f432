package pool

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"unicode"
)

// userKeyLen is the number of HMAC bytes kept in a user key: 128 bits make a
// collision between two users of one deployment practically impossible
// (about 2^-88 for a million users) and keep stored keys at 32 hex digits.
const userKeyLen = 16

// userTagLen is the number of hex digits of a user key that logs show.
const userTagLen = 8

// normalizeUser is the one form of an e-mail that is hashed: trimmed and
// lower-cased, so " Alice@Example.com" and "alice@example.com" are one user.
func normalizeUser(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// maxUserLen bounds a user: an e-mail address is at most 254 characters;
// the margin admits what mail servers accept in practice.
const maxUserLen = 320

// errBadUser is returned by [ParseUser] for a user that cannot be one
// e-mail address.
var errBadUser = errors.New("pool: a user must be one e-mail address")

// ParseUser is the one check of a caller's user (the X-Gradiopool-User
// header of the gateway and its front door): it returns the normalizeUser
// form, or errBadUser when the value is longer than 320 bytes or holds
// spaces or control characters. "" is the anonymous user.
func ParseUser(s string) (string, error) {
	u := normalizeUser(s)
	if len(u) > maxUserLen || strings.IndexFunc(u, unicode.IsControl) >= 0 || strings.ContainsAny(u, " \t") {
		return "", errBadUser
	}
	return u, nil
}

// userHasher turns e-mails into the keyed hashes that stand for them
// everywhere (assignment store, logs, stats): HMAC-SHA256 under one key.
// A [Pool] owns the one hasher (Config.HashKey) and lends its tags out
// through [Pool.UserTag], so the gateway's logs and the front door's name a
// user the way the pool's store does. The zero value is not usable.
type userHasher struct {
	key []byte
}

// newUserHasher returns a hasher keyed by key; an empty key means a random
// one (hashes then differ from one process to the next).
func newUserHasher(key []byte) userHasher {
	if len(key) == 0 {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
	}
	return userHasher{key: key}
}

// hash is the user key of an e-mail: 32 hex digits of the keyed hash of its
// normalised form. "" (anonymous) maps to "".
func (h userHasher) hash(user string) string {
	u := normalizeUser(user)
	if u == "" {
		return ""
	}
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(u))
	return hex.EncodeToString(m.Sum(nil)[:userKeyLen])
}

// tag is the part of the user key that logs show: its first 8 hex digits.
// "" stays "".
func (h userHasher) tag(user string) string { return keyPrefix(h.hash(user)) }

// keyPrefix is the part of a user key that may be logged.
func keyPrefix(key string) string {
	if len(key) > userTagLen {
		return key[:userTagLen]
	}
	return key
}
