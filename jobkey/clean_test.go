package jobkey

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// hostile are values a launcher's variable or MLflow's node id can hold
// that a key or a node id cannot hold as they are, and the values they
// would be cleaned to: each pair must stay apart.
var hostile = []string{
	"a b", "a_b", "a-b", "a.b", "a:b", "a/b", "a__b", "a\tb", "a\nb",
	"run-é", "run-ü", "run-_", "run-__", "é", "ü", "\xff", "\xfe", "run-\xff", "run-\xfe",
	"a_b--0123456789", "a_b--abcdef0123", "x--0123456789",
	strings.Repeat("x", 120) + "1", strings.Repeat("x", 120) + "2", strings.Repeat("y", 119),
	strings.Repeat("z", 40), strings.Repeat("z", 41), strings.Repeat("z", 60) + "a", strings.Repeat("z", 60) + "b",
	strings.Repeat("w", 300), strings.Repeat("w", 301), strings.Repeat("é", 90), strings.Repeat("ü", 90),
	"1_2", "1.2", "1:2", "12", "0", "00", "7", "4242", "'", `"`, `\`, "it's", "a\x00b", "🚀", "a=b", "a@b+c",
	".", "..", "-", "_", "none", "None",
}

// structural are short values built of a key's separators.
var structural = []string{"", "1", "2", "3", "1_2", "2_3", "1.2", "2.3", "1:2", "a", "b", "a:b", "b:1", "a b", "a_b", "a.b", "a/b", "a-b"}

// small are the fewer of them that every tuple of a launcher's fields is
// tried with.
var small = []string{"", "1", "2", "1_2", "1.2", "a", "a:b", "b:1"}

// randomValues are n values drawn from runes a key allows, its separators
// and runes it does not, of lengths up to 250; the seed is logged so that
// a failure replays.
func randomValues(t *testing.T, n int) []string {
	seed := uint64(time.Now().UnixNano())
	t.Logf("random values: seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	runes := []rune("ab01_-.:/@+=é ü'\"\\\x00\t🚀")
	out := make([]string, n)
	for i := range out {
		b := make([]rune, r.IntN(250))
		for j := range b {
			b[j] = runes[r.IntN(len(runes))]
		}
		out[i] = string(b)
	}
	return out
}

// values is hostile plus random ones, trimmed (every launcher value is:
// surrounding whitespace is not part of it) and without repeats.
func values(t *testing.T) []string {
	var out []string
	for _, v := range append(slices.Clone(hostile), randomValues(t, 60)...) {
		if v = strings.TrimSpace(v); !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// A launcher's key fields, and the environment of one node of its job.
type keyLauncher struct {
	name   string
	fields []string                                     // what the key is made of
	input  func(vals map[string]string, node int) Input // node: which node of the job
	// material is what the key reads of vals: values that name one job
	// alike (an array task's plain job id beside its array job and task)
	// map to the same material.
	material func(vals map[string]string) []string
}

func envOf(vals map[string]string, extra ...string) func(string) string {
	m := map[string]string{}
	for k, v := range vals {
		if v != "" {
			m[k] = v
		}
	}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return func(k string) string { return strings.TrimSpace(m[k]) }
}

var nodeEnv = []string{"0", "1", "7"}

var keyLaunchers = []keyLauncher{
	{"slurm", []string{"SLURM_CLUSTER_NAME", "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_STEP_ID"},
		func(v map[string]string, node int) Input {
			n := nodeEnv[node]
			return Input{Getenv: envOf(v, "SLURM_NODEID="+n, "SLURM_PROCID="+n, "SLURM_LOCALID=0", "SLURM_STEP_NUM_NODES=3"), Hostname: "h" + n}
		},
		func(v map[string]string) []string {
			id := []string{"job", v["SLURM_JOB_ID"]}
			if v["SLURM_ARRAY_JOB_ID"] != "" && v["SLURM_ARRAY_TASK_ID"] != "" {
				id = []string{"array", v["SLURM_ARRAY_JOB_ID"], v["SLURM_ARRAY_TASK_ID"]}
			}
			return append(append([]string{v["SLURM_CLUSTER_NAME"]}, id...), v["SLURM_STEP_ID"])
		}},
	{"jobset", []string{"JOBSET_NAME", "JOBSET_UID"},
		func(v map[string]string, node int) Input {
			return Input{Getenv: envOf(v, "JOB_GLOBAL_INDEX="+nodeEnv[node], "JOB_COMPLETION_INDEX=0")}
		},
		func(v map[string]string) []string { return []string{v["JOBSET_NAME"], v["JOBSET_UID"]} }},
	{"indexed-job", []string{"JOB_NAME", "JOB_UID"},
		func(v map[string]string, node int) Input {
			return Input{Getenv: envOf(v, "JOB_COMPLETION_INDEX="+nodeEnv[node])}
		},
		func(v map[string]string) []string { return []string{v["JOB_NAME"], v["JOB_UID"]} }},
	{"torchelastic", []string{"TORCHELASTIC_RUN_ID"},
		func(v map[string]string, node int) Input {
			return Input{Getenv: envOf(v, "GROUP_RANK="+nodeEnv[node], "RANK="+nodeEnv[node], "GROUP_WORLD_SIZE=8")}
		},
		func(v map[string]string) []string { return []string{v["TORCHELASTIC_RUN_ID"]} }},
	{"torchrun", []string{"--rdzv-id"},
		func(v map[string]string, node int) Input {
			return Input{Getenv: envOf(nil), Hostname: "h" + nodeEnv[node],
				Argv: []string{"torchrun", "--nnodes=8", "--node-rank=" + nodeEnv[node], "--rdzv-id=" + v["--rdzv-id"], "train.py"}}
		},
		func(v map[string]string) []string { return []string{v["--rdzv-id"]} }},
}

// Two different jobs never share a key, however their launcher's values
// look (cleaned values carry a hash of the raw ones), and every node of one
// job finds the same key: for every launcher and every field, each value
// of a hostile and a random corpus, alone and mixed with the others'.
func TestKeysOfDistinctValuesDiffer(t *testing.T) {
	vals := values(t)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for _, l := range keyLaunchers {
		t.Run(l.name, func(t *testing.T) {
			seen := map[string][]string{} // key -> material
			try := func(v map[string]string) {
				j := Detect(l.input(v, 0))
				if j.Launcher != l.name {
					return // these values name no job of this launcher (unset, "none")
				}
				if !ValidKey(j.Key) {
					t.Fatalf("%q: key %q is not valid", v, j.Key)
				}
				m := l.material(v)
				if prev, ok := seen[j.Key]; ok && !slices.Equal(prev, m) {
					t.Fatalf("values %q and %q share key %q", prev, m, j.Key)
				}
				seen[j.Key] = m
				for node := 1; node < len(nodeEnv); node++ {
					if k := Detect(l.input(v, node)).Key; k != j.Key {
						t.Fatalf("%q: node %d finds key %q, node 0 %q", v, node, k, j.Key)
					}
				}
			}
			base := map[string]string{}
			for _, f := range l.fields {
				base[f] = "7"
			}
			for _, f := range l.fields {
				for _, x := range vals {
					v := maps.Clone(base)
					v[f] = x
					try(v)
				}
			}
			// Every tuple of a few short values made of the separators, so
			// that one field's value meets another's across a separator.
			tuple := make([]int, len(l.fields))
			for {
				v := map[string]string{}
				for i, f := range l.fields {
					v[f] = small[tuple[i]]
				}
				try(v)
				i := 0
				for ; i < len(tuple) && tuple[i] == len(small)-1; i++ {
					tuple[i] = 0
				}
				if i == len(tuple) {
					break
				}
				tuple[i]++
			}
			// Tuples of values, half of them drawn from a few short ones
			// made of the separators, so that one field's value meets
			// another's across a separator.
			for range 4000 {
				v := map[string]string{}
				for _, f := range l.fields {
					if r.IntN(2) == 0 {
						v[f] = structural[r.IntN(len(structural))]
					} else {
						v[f] = vals[r.IntN(len(vals))]
					}
				}
				try(v)
			}
			t.Logf("%d distinct keys", len(seen))
		})
	}
}

// A key is its launcher's values as they are when they fit, readable; a
// value that does not fit is cleaned, the key carries the hash and one
// warning names the variable.
func TestKeyCleaned(t *testing.T) {
	cases := []struct {
		name   string
		env    []string
		argv   []string
		prefix string // the key without its hash; the whole key when not hashed
		hashed bool
		warn   string
	}{
		{"slurm as it is", []string{"SLURM_CLUSTER_NAME=alps", "SLURM_JOB_ID=4242", "SLURM_STEP_ID=0", "SLURM_NODEID=0"}, nil, "slurm:alps:4242.0", false, ""},
		{"slurm cluster with a space", []string{"SLURM_CLUSTER_NAME=a b", "SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_NODEID=0"}, nil, "slurm:a_b:1.0", true, `SLURM_CLUSTER_NAME="a b"`},
		{"slurm cluster with a colon", []string{"SLURM_CLUSTER_NAME=a:b", "SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_NODEID=0"}, nil, "slurm:a_b:1.0", true, `SLURM_CLUSTER_NAME="a:b"`},
		{"slurm step that is no number", []string{"SLURM_CLUSTER_NAME=c", "SLURM_JOB_ID=1", "SLURM_STEP_ID=x", "SLURM_NODEID=0"}, nil, "slurm:c:1._", true, `SLURM_STEP_ID="x"`},
		{"torchelastic id with a space", []string{"TORCHELASTIC_RUN_ID=a b", "GROUP_RANK=0"}, nil, "torchrun:a_b", true, `TORCHELASTIC_RUN_ID="a b"`},
		{"torchrun id over 120", nil, []string{"torchrun", "--nnodes=2", "--rdzv-id=" + strings.Repeat("x", 121), "t.py"}, "torchrun:" + strings.Repeat("x", 120), true, "--rdzv-id="},
		{"torchrun id that ends like a hash", []string{"TORCHELASTIC_RUN_ID=a--0123456789", "GROUP_RANK=0"}, nil, "torchrun:a--0123456789", true, "TORCHELASTIC_RUN_ID"},
		{"jobset uid with a slash is kept", []string{"JOBSET_NAME=llm", "JOBSET_UID=a/b", "JOB_GLOBAL_INDEX=0"}, nil, "jobset:llm:a/b", false, ""},
		{"indexed job, unicode name", []string{"JOB_NAME=tréin", "JOB_UID=u1", "JOB_COMPLETION_INDEX=0"}, nil, "k8s-job:tr_in:u1", true, `JOB_NAME="tréin"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := Detect(Input{Getenv: env(c.env...), Argv: c.argv, Hostname: "h"})
			want := c.prefix
			if c.hashed {
				if !looksHashed(j.Key) || !strings.HasPrefix(j.Key, c.prefix+hashSep) || len(j.Key) != len(c.prefix)+hashLen {
					t.Fatalf("key %q, want %s%s<%d hex digits>", j.Key, c.prefix, hashSep, hashDigits)
				}
				want = j.Key
			}
			if j.Key != want || !ValidKey(j.Key) {
				t.Fatalf("key %q, want %q", j.Key, want)
			}
			n := slices.IndexFunc(j.Warnings, func(w string) bool { return strings.Contains(w, "job key") })
			switch {
			case c.warn == "" && n >= 0:
				t.Errorf("a warning for a key used as it is: %q", j.Warnings)
			case c.warn != "" && (len(j.Warnings) != 1 || !strings.Contains(j.Warnings[0], c.warn) || !strings.Contains(j.Warnings[0], j.Key)):
				t.Errorf("warnings %q, want one naming %s and the key", j.Warnings, c.warn)
			}
		})
	}
}

// A launcher's number that is not one is not used, and said once; the job
// runs on what is left (the node id falls back to the host name).
func TestLauncherNumberNotUsed(t *testing.T) {
	j := Detect(Input{Getenv: env("SLURM_CLUSTER_NAME=c", "SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_NODEID=two", "SLURM_STEP_NUM_NODES=x2"), Hostname: "gpu-9"})
	if j.Key != "slurm:c:1.0" || j.NodeID != "gpu-9" || j.Rank != -1 || j.Nodes != 0 {
		t.Errorf("key %q node %q rank %d nodes %d; want the key, the host name, unknown rank and count", j.Key, j.NodeID, j.Rank, j.Nodes)
	}
	for _, v := range []string{`SLURM_NODEID="two"`, `SLURM_STEP_NUM_NODES="x2"`} {
		if n := len(slices.DeleteFunc(slices.Clone(j.Warnings), func(w string) bool { return !strings.Contains(w, v) })); n != 1 {
			t.Errorf("%d warnings name %s, want 1: %q", n, v, j.Warnings)
		}
	}
	// Without a key no launcher value is used: nothing to warn about.
	if j := Detect(Input{Getenv: env("OMPI_COMM_WORLD_RANK=x"), Hostname: "h"}); len(j.Warnings) != 0 {
		t.Errorf("warnings without a key: %q", j.Warnings)
	}
}

// A Slurm environment with a node id but no step is taken as the batch
// script, one node: said in one line, with what to do, unless it is plainly
// the batch script of a one-node allocation.
func TestSlurmNodeWithoutStep(t *testing.T) {
	cases := []struct {
		env  []string
		warn bool
	}{
		{[]string{"SLURM_NODEID=2"}, true},
		{[]string{"SLURM_NODEID=0", "SLURM_JOB_NUM_NODES=4"}, true},
		{[]string{"SLURM_NODEID=0", "SLURM_JOB_NUM_NODES=4", "SLURM_STEP_ID=4294967294"}, true},
		{[]string{"SLURM_NODEID=0", "SLURM_JOB_NUM_NODES=1"}, false},
		{[]string{"SLURM_NODEID=1", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_NODES=4"}, false},
		{nil, false},
	}
	for _, c := range cases {
		j := Detect(Input{Getenv: env(append([]string{"SLURM_CLUSTER_NAME=c", "SLURM_JOB_ID=5"}, c.env...)...)})
		got := slices.ContainsFunc(j.Warnings, func(w string) bool {
			return strings.Contains(w, "no SLURM_STEP_ID") && strings.Contains(w, "one node") && strings.Contains(w, "srun bridge")
		})
		if got != c.warn || len(j.Warnings) > 1 {
			t.Errorf("%q: warnings %q, want the batch-script warning: %v", c.env, j.Warnings, c.warn)
		}
	}
}

// A generation that is no number is cleaned as a key part: short, and
// distinct for distinct values.
func TestGenerationCleaned(t *testing.T) {
	seen := map[string]string{}
	for _, v := range values(t) {
		j := Detect(Input{Getenv: env("SLURM_CLUSTER_NAME=c", "SLURM_JOB_ID=5", "SLURM_STEP_ID=0", "SLURM_NODEID=0", "SLURM_JOB_START_TIME="+v)})
		g := j.Generation
		if v != "" && (g == "" || len(g) > 20+hashLen || strings.ContainsFunc(g, func(r rune) bool { return !keyRune(r) })) {
			t.Fatalf("SLURM_JOB_START_TIME=%q: generation %q", v, g)
		}
		if prev, ok := seen[g]; ok && prev != v {
			t.Fatalf("start times %q and %q share generation %q", prev, v, g)
		}
		seen[g] = v
	}
	if j := Detect(Input{Getenv: env("SLURM_JOB_ID=5", "SLURM_JOB_START_TIME=1764900000")}); j.Generation != "1764900000" {
		t.Errorf("a start time is the generation as it is: %q", j.Generation)
	}
}

// Another tool's node name becomes one key segment: as it is when it is
// one, else cleaned with a hash of the raw value; distinct names stay
// distinct.
func TestNodeIDFrom(t *testing.T) {
	seen := map[string]string{}
	for _, v := range values(t) {
		id, changed := NodeIDFrom(v)
		if v == "" {
			if id != "" || changed {
				t.Fatalf("NodeIDFrom(\"\") = %q, %v", id, changed)
			}
			continue
		}
		if !ValidNodeID(id) {
			t.Fatalf("NodeIDFrom(%q) = %q: not a valid node id", v, id)
		}
		if changed != (id != v) || changed != looksHashed(id) {
			t.Fatalf("NodeIDFrom(%q) = %q, changed %v", v, id, changed)
		}
		if prev, ok := seen[id]; ok && prev != v {
			t.Fatalf("node names %q and %q share node id %q", prev, v, id)
		}
		seen[id] = v
	}
	for v, want := range map[string]string{"gpu-3": "gpu-3", "node_1.rack-2": "node_1.rack-2", strings.Repeat("n", 100): strings.Repeat("n", 100)} {
		if id, changed := NodeIDFrom(v); id != want || changed {
			t.Errorf("NodeIDFrom(%q) = %q, %v; want it as it is", v, id, changed)
		}
	}
	if id, _ := NodeIDFrom("gpu box/1"); !strings.HasPrefix(id, "gpu_box_1--") {
		t.Errorf("NodeIDFrom(\"gpu box/1\") = %q, want gpu_box_1--<hash>", id)
	}
	for _, bad := range []string{".", ".."} {
		if ValidNodeID(bad) {
			t.Errorf("ValidNodeID(%q): MLflow refuses system/%s/...", bad, bad)
		}
	}
}
