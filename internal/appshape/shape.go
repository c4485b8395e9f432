package appshape

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gradiopool/gradiopool/gradio"
)

// Shape is the part of a Gradio config that callers depend on, one
// line per feature: whether login is needed, and each dependency's
// fn_index, api_name, visibility, generator and queue flags and the types
// of its input and output components, in order. Volatile fields (app_id,
// root, version, labels, layout, component class hashes) are left out, so
// two replicas of one app give the same lines. Component ids are left out
// too: Gradio releases number one app's components differently, and the
// front door maps them per replica (IDMaps).
//
// The protocol and the API prefix are left out too: the front door serves
// each call the way its own replica needs (relayed over sse_v3, bridged
// with the Go client otherwise, see gateway/frontdoor) and presents one Gradio 5 app
// over them, so replicas of one app on different Gradio generations (a
// rolling upgrade) are one app for it.
func Shape(c *gradio.Config) []string {
	out := []string{
		"auth_required " + strconv.FormatBool(c.AuthRequired),
	}
	comp := func(ids []int) string {
		parts := make([]string, 0, len(ids))
		for _, id := range ids {
			t := "?"
			for i := range c.Components {
				if c.Components[i].ID == id {
					t = c.Components[i].Type
					break
				}
			}
			parts = append(parts, t)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	for _, d := range c.Dependencies {
		name := "(no api_name)"
		if d.APIName != "" {
			name = "/" + d.APIName
		}
		// Whether the call is queued, not how the config says it: before
		// 4.22 an event's "queue" is null (the app's enable_queue), later
		// releases write true for the same app.
		q := strconv.FormatBool(c.EnableQueue)
		if d.Queue != nil {
			q = strconv.FormatBool(*d.Queue)
		}
		out = append(out, fmt.Sprintf("fn_index %d %s in %s out %s generator=%t queue=%s backend=%t private=%t undocumented=%t",
			d.FnIndex, name, comp(d.Inputs), comp(d.Outputs), d.Generator, q, d.BackendFn, d.Private, d.Undocumented))
	}
	return out
}

// Fingerprint is a short hash of [Shape]: two configs with one
// fingerprint serve one app.
func Fingerprint(c *gradio.Config) string { return FingerprintOf(Shape(c)) }

// FingerprintOf is the fingerprint of shape lines (from [Shape]).
func FingerprintOf(lines []string) string {
	h := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(h[:8])
}

// Diff lists up to max lines only in a ("-") or only in b ("+").
func Diff(a, b []string, max int) []string {
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, "+ "+l)
		}
	}
	if len(out) > max {
		out = append(out[:max], fmt.Sprintf("(%d more)", len(out)-max))
	}
	return out
}
