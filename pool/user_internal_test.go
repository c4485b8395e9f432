package pool

import "testing"

func TestUserHasherTagsTheNormalisedUser(t *testing.T) {
	h := newUserHasher([]byte("k"))
	if h.tag(" Alice@Example.com") != h.tag("alice@example.com") || len(h.tag("a@b.c")) != 8 || h.tag("") != "" {
		t.Error("the hasher does not tag the normalised user")
	}
	if newUserHasher([]byte("other")).tag("a@b.c") == h.tag("a@b.c") {
		t.Error("two keys give one tag")
	}
}
