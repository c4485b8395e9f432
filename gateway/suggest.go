package gateway

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
)

// ConfigEnvPrefix starts every environment variable of the configuration.
const ConfigEnvPrefix = "GRADIOPOOL_"

// secretEnv are the secrets' variables (read by ApplyEnv, never from a file).
var secretEnv = []string{"GRADIOPOOL_ADMIN_TOKEN", "GRADIOPOOL_ADMIN_TOKEN_FILE", "GRADIOPOOL_API_KEYS", "GRADIOPOOL_API_KEYS_FILE", "GRADIOPOOL_HASH_KEY", "GRADIOPOOL_REDIS_URL"}

// otherEnv are GRADIOPOOL_ variables that are no setting of `serve` but
// may be in its environment: the tests' and the tools' switches (make test
// sets some of them for every process it starts) and those of the web app
// that runs beside the gateway in the Space recipe (deploy/hf-space), which
// shares the gateway's environment there. Serve ignores them; every other
// GRADIOPOOL_ variable is refused as a likely misspelling. A test keeps this
// list complete: every GRADIOPOOL_ name the repository uses is a setting,
// a secret or here.
var otherEnv = []string{
	// the tests and tools
	"GRADIOPOOL_ARTIFACTS", "GRADIOPOOL_BENCH_CHILD", "GRADIOPOOL_BENCH_CHILD_CONFIG", "GRADIOPOOL_CHROMIUM",
	"GRADIOPOOL_CONFORMANCE_AUTH", "GRADIOPOOL_CONFORMANCE_AUTH_URL", "GRADIOPOOL_CONFORMANCE_URL",
	"GRADIOPOOL_REAL_BRIDGED", "GRADIOPOOL_REAL_MIXED", "GRADIOPOOL_REAL_PYTHON", "GRADIOPOOL_REAL_RELAYED", "GRADIOPOOL_REAL_RENDER_URL", "GRADIOPOOL_REAL_REPLICAS",
	"GRADIOPOOL_REAL_STREAM_URL", "GRADIOPOOL_REAL_THREADS", "GRADIOPOOL_REAL_URL", "GRADIOPOOL_REAL_URLS", "GRADIOPOOL_REDIS_ADDR",
	"GRADIOPOOL_RELIABILITY", "GRADIOPOOL_REQUIRE_CHROMIUM", "GRADIOPOOL_REQUIRE_NODE", "GRADIOPOOL_REQUIRE_REDIS",
	"GRADIOPOOL_SOAK_HEAPPROFILE", "GRADIOPOOL_UPDATE_README",
	// the web app of the Space recipe (deploy/hf-space)
	"GRADIOPOOL_API_KEY", "GRADIOPOOL_APP_KEY", "GRADIOPOOL_URL",
}

// IgnoredEnv lists the GRADIOPOOL_ variables that are no configuration of
// the gateway and that serve accepts in its environment without reading
// them (see [CheckEnviron]).
func IgnoredEnv() []string { return slices.Clone(otherEnv) }

// configEnv is every variable serve reads: the settings', the secrets'
// and GRADIOPOOL_CONFIG.
func configEnv() []string {
	out := []string{ConfigEnvFile}
	out = append(out, secretEnv...)
	for _, s := range settings {
		if s.env != "" {
			out = append(out, s.env)
		}
	}
	return out
}

// CheckEnviron refuses every GRADIOPOOL_ variable of environ ("NAME=value"
// pairs, as os.Environ gives them) that serve does not read and that is not
// one of [IgnoredEnv]: a misspelt variable would otherwise be ignored
// without a word. Each is named with the variable it most likely meant.
// Values are never part of the message (they may be secrets).
func CheckEnviron(environ []string) error {
	known := configEnv()
	var bad []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, ConfigEnvPrefix) || slices.Contains(known, name) || slices.Contains(otherEnv, name) {
			continue
		}
		msg := fmt.Sprintf("%s is no setting", name)
		if s := suggest(name, known, ConfigEnvPrefix, "_"); s != "" {
			msg += fmt.Sprintf(": did you mean %s?", s)
		}
		bad = append(bad, msg)
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("environment: %s (unset it; `gradiopool serve -h` lists the variables)", strings.Join(bad, "; "))
}

// suggestKey is the configuration key most like key (a YAML path), or "".
func suggestKey(key string) string {
	keys := make([]string, len(settings))
	for i, s := range settings {
		keys[i] = s.key
	}
	return suggest(key, keys, "", ".")
}

// suggest returns the candidate most likely meant by name, or "": one that
// ends with name's last part after sep (a key or a variable whose section
// was left out: max_connections for pool.max_connections), else the nearest by
// Levenshtein distance (compared without the common prefix) when it is
// close enough to be a typo: at most a third of the name's length.
func suggest(name string, candidates []string, prefix, sep string) string {
	bare := strings.ToLower(strings.TrimPrefix(name, prefix))
	var tail []string
	for _, c := range candidates {
		cb := strings.ToLower(strings.TrimPrefix(c, prefix))
		if strings.HasSuffix(cb, sep+bare) || strings.HasSuffix(bare, sep+cb) {
			tail = append(tail, c)
		}
	}
	if len(tail) == 1 {
		return tail[0]
	}
	best, bestD := "", len(bare)/3+1
	for _, c := range candidates {
		d := levenshtein(bare, strings.ToLower(strings.TrimPrefix(c, prefix)))
		if d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// levenshtein is the edit distance of a and b (insertions, deletions and
// substitutions of bytes; the names compared are ASCII), in one row.
func levenshtein(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		diag := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			next := min(row[j]+1, row[j-1]+1, diag+cost)
			diag, row[j] = row[j], next
		}
	}
	return row[len(b)]
}

// spacePage recognises the URL of a Space's page on the Hub
// (https://huggingface.co/spaces/owner/app, the address a browser shows)
// and returns its Space id; "" for any other replica.
func spacePage(r string) string {
	u, err := url.Parse(r)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return ""
	}
	switch strings.ToLower(u.Hostname()) {
	case "huggingface.co", "www.huggingface.co", "hf.co":
	default:
		return ""
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) < 3 || parts[0] != "spaces" || parts[1] == "" || parts[2] == "" {
		return ""
	}
	return parts[1] + "/" + parts[2]
}

// replicaIdentity is what two spellings of one replica share: a Space id
// and its *.hf.space URL give the same subdomain (owner-name, lower case,
// _ and . as -), a URL its scheme, host (lower case, without its default
// port) and path (without a trailing slash). Space ids are not case
// sensitive on the Hub.
func replicaIdentity(r string) string {
	r = strings.TrimSpace(r)
	if id := spacePage(r); id != "" {
		r = id
	}
	if !strings.HasPrefix(r, "http://") && !strings.HasPrefix(r, "https://") {
		return "space:" + hfSubdomain(r)
	}
	u, err := url.Parse(r)
	if err != nil {
		return r
	}
	host := strings.ToLower(u.Hostname())
	if sub, ok := strings.CutSuffix(host, ".hf.space"); ok && strings.Trim(u.Path, "/") == "" {
		return "space:" + sub
	}
	port := u.Port()
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		port = ""
	}
	if port != "" {
		host += ":" + port
	}
	return u.Scheme + "://" + host + strings.TrimRight(u.Path, "/")
}

// hfSubdomain is the *.hf.space subdomain of a Space id.
func hfSubdomain(id string) string {
	return strings.NewReplacer("/", "-", "_", "-", ".", "-").Replace(strings.ToLower(id))
}
