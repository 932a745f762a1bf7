package redact

import (
	_ "embed"
	"strings"
	"sync"
)

// plainValue reports whether v is shown as it is (docs/reliability.md
// states the same rule): a number, or pieces joined by '/', ',', '@' and
// ':' (paths, org/model names, lists, host:port, deepspeed's
// host@host:0,1), each piece a number, a plain word, "." or "..", with at
// most one acronym in all (see plainPart). A leading '~' and a list in [ ]
// are allowed; the text after a ':' must start with a digit, '/' or '.'
// (localhost:29500, cuda:0, image:2.1, file:./mlruns), so user:password
// is not plain.
func plainValue(v string) bool { return plainAs(v, asValue) }

// judge says what a value is judged as.
type judge int

const (
	asValue judge = iota // a value on its own (a positional argument)
	asNamed              // the value of an option or of NAME=: also a compound of two words (compound)
	asName               // a name: its words need not read like words
)

// plainAs is plainValue for a value judged as j.
func plainAs(v string, j judge) bool {
	if number(v) {
		return true
	}
	if strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]") {
		v = v[1 : len(v)-1]
	}
	v = strings.TrimPrefix(v, "~")
	for i := 0; i+1 < len(v); i++ {
		if v[i] == ':' && !isDigit(v[i+1]) && v[i+1] != '/' && v[i+1] != '.' {
			return false
		}
	}
	acronyms := 0
	for _, p := range strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune("/,@:", r) }) {
		n, ok := plainWord(p, j)
		if !ok && p != "." && p != ".." && !number(p) {
			return false
		}
		acronyms += n
	}
	return acronyms <= 1
}

// fileExts are the extensions of the files a training command names:
// scripts, notebooks, configs, data and checkpoints.
var fileExts = map[string]bool{
	"py": true, "sh": true, "bash": true, "ipynb": true, "r": true, "jl": true, "js": true, "ts": true, "rb": true,
	"pl": true, "lua": true, "yaml": true, "yml": true, "json": true, "jsonl": true, "toml": true, "cfg": true,
	"ini": true, "conf": true, "txt": true, "csv": true, "tsv": true, "parquet": true, "pt": true, "pth": true,
	"ckpt": true, "safetensors": true, "bin": true, "gguf": true, "onnx": true, "h5": true, "npz": true, "npy": true,
	"pkl": true,
}

// filePath reports whether v is the path of a file named by its
// extension (mytrain.py, nanogpt/train.py, ~/exp/ds_zero3.json): pieces
// joined by '/', after an optional "/", "./", "../" or "~/", each at most
// 64 letters, digits and "-_." and not a hex blob (the last without its
// extension), the last ending in one of fileExts. A script's name is what
// a run is known by, and no token people are given ends in ".py": it is
// shown whether or not its words read like words.
func filePath(v string) bool {
	if len(v) > 256 {
		return false
	}
	for _, p := range []string{"/", "./", "../", "~/"} {
		if strings.HasPrefix(v, p) {
			v = v[len(p):]
			break
		}
	}
	pieces := strings.Split(v, "/")
	last := pieces[len(pieces)-1]
	stem, ext, ok := cutLast(last, ".")
	if !ok || stem == "" || !fileExts[strings.ToLower(ext)] {
		return false
	}
	pieces[len(pieces)-1] = stem
	for _, p := range pieces {
		if p == "" || len(p) > 64 || hexBlob(p) || strings.Trim(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" {
			return false
		}
	}
	return true
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// number: an optionally signed decimal with an optional exponent, at most
// 24 bytes (0.1, -1, 3e-4, 1.0e+05, 20240101).
func number(s string) bool {
	if len(s) == 0 || len(s) > 24 {
		return false
	}
	if s[0] == '-' || s[0] == '+' {
		s = s[1:]
	}
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	if exp != "" && (exp[0] == '-' || exp[0] == '+') {
		exp = exp[1:]
	}
	if hasExp && !digits(exp) {
		return false
	}
	whole, frac, _ := strings.Cut(mant, ".")
	return whole+frac != "" && (whole == "" || digits(whole)) && (frac == "" || digits(frac))
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

func isDigit(c byte) bool     { return c >= '0' && c <= '9' }
func isLower(c byte) bool     { return c >= 'a' && c <= 'z' }
func isUpper(c byte) bool     { return c >= 'A' && c <= 'Z' }
func isLowerRune(c rune) bool { return c >= 'a' && c <= 'z' }

// plainWord reports whether w reads like a name people type, and counts
// its acronyms: at most 64 bytes of ASCII letters and digits joined by
// '-', '_' and '.', not a hex blob, each joined part passing plainPart.
// bf16, adamw_torch_fused, meta-llama, Llama-3.1-8B-Instruct and
// wikitext-103-raw-v1 are plain words; x7Kq9mZp, AKIAIOSFODNN7EXAMPLE
// and 3f2a9c1e-... are not.
//
// A name (asName: an environment variable, a Hydra key) is judged by the
// same shapes, without asking its words to read like words: SOME_CONF,
// trainer.max_epochs, model.hiddenSize.
func plainWord(w string, j judge) (acronyms int, ok bool) {
	if w == "" || len(w) > 64 || hexBlob(w) {
		return 0, false
	}
	for i := 0; i < len(w); i++ {
		if c := w[i]; !isDigit(c) && !isLower(c) && !isUpper(c) && c != '-' && c != '_' && c != '.' {
			return 0, false
		}
	}
	for _, p := range strings.FieldsFunc(w, func(r rune) bool { return r == '-' || r == '_' || r == '.' }) {
		n, ok := plainPart(p, j)
		if !ok {
			return 0, false
		}
		acronyms += n
	}
	return acronyms, true
}

// hexBlob: at least 8 hex digits (joiners aside) mixing digits and the
// letters a-f, as hashes, UUIDs and many keys are.
func hexBlob(w string) bool {
	n, hasDigit, hasLetter := 0, false, false
	for i := 0; i < len(w); i++ {
		switch c := w[i]; {
		case isDigit(c):
			hasDigit = true
		case c|0x20 >= 'a' && c|0x20 <= 'f':
			hasLetter = true
		case c == '-' || c == '_' || c == '.':
			continue
		default:
			return false
		}
		n++
	}
	return n >= 8 && hasDigit && hasLetter
}

// plainPart judges one part of a word (letters and digits) and counts its
// acronyms: its digits placed as names place them (digitsPlaced), each run
// of 2 letters or more passing letters, and an acronym's digits at most 2
// (gptq4, sm90: a version or a size, not a serial).
func plainPart(p string, j judge) (acronyms int, ok bool) {
	runs := splitRuns(p)
	if !digitsPlaced(runs) {
		return 0, false
	}
	for _, r := range runs {
		if isDigit(r[0]) {
			continue
		}
		n, ok := letters(r, j)
		if !ok {
			return 0, false
		}
		acronyms += n
	}
	if _, _, longest := digitRuns(runs); acronyms > 0 && longest > 2 {
		return 0, false
	}
	return acronyms, true
}

// splitRuns splits p into its runs of letters and of digits.
func splitRuns(p string) []string {
	var runs []string
	for i := 0; i < len(p); {
		j := i + 1
		for j < len(p) && isDigit(p[j]) == isDigit(p[i]) {
			j++
		}
		runs = append(runs, p[i:j])
		i = j
	}
	return runs
}

// digitsPlaced reports whether digits sit where names put them: after a
// word (llama3, bf16), before a short lowercase word (4bit), or with
// single letters as units and versions (8b, gpt4o, c10d, 8x7b, e4m3). At
// most two runs of digits (5 digits in all when two), 20 digits in a run,
// four runs in all; a unit letter after a capital is a capital (7B, not
// GH4i).
func digitsPlaced(runs []string) bool {
	n, total, longest := digitRuns(runs)
	if n > 2 || len(runs) > 4 || n == 2 && total > 5 || longest > 20 {
		return false
	}
	capital := false
	for k, r := range runs {
		switch {
		case isDigit(r[0]):
		case len(r) == 1:
			if capital && isLower(r[0]) {
				return false
			}
		case k == 0 && n < 2: // a word before its digits, or the whole part
		case k == 1 && len(runs) == 2 && len(r) <= 4 && strings.ToLower(r) == r: // 4bit
		default:
			return false
		}
		capital = capital || strings.ToLower(r) != r
	}
	return true
}

// digitRuns counts the runs of digits, their digits and the longest run.
func digitRuns(runs []string) (n, total, longest int) {
	for _, r := range runs {
		if isDigit(r[0]) {
			n, total, longest = n+1, total+len(r), max(longest, len(r))
		}
	}
	return n, total, longest
}

// letters judges a run of letters, split at camelCase humps, and counts
// its acronyms. The humps are laid out as names are (layout); each of 3
// letters or more reads like a word (readsLikeWord), or, in an option's
// value, is a compound of two words (myproj), or is an acronym of at most
// 4 letters that is not Capitalized (nccl, GPTQ). A name's words need not
// read like words (hiddenSize, SOME_CONF).
func letters(r string, j judge) (acronyms int, ok bool) {
	names := j == asName
	hs := humps(r)
	if !layout(hs, names) {
		return 0, false
	}
	for _, h := range hs {
		capitalized := isUpper(h[0]) && isLower(h[len(h)-1])
		switch {
		case names || len(h) <= 2 || readsLikeWord(strings.ToLower(h)):
		case j == asNamed && compound(strings.ToLower(h)):
		case capitalized || len(h) > 4:
			return 0, false
		default:
			acronyms++
		}
	}
	return acronyms, true
}

// layout reports whether a run's humps are laid out as names are: one
// hump (adamw, Llama, GPTQ); Capitalized humps of 3 letters or more, the
// last possibly in capitals (DeepSeek, EleutherAI, HuggingFaceH); or one
// small letter and capitals (xLSTM). A name may also start with a small
// word (hiddenSize).
func layout(hs []string, names bool) bool {
	for i, h := range hs {
		upper, capitalized := strings.ToUpper(h) == h, isUpper(h[0]) && isLower(h[len(h)-1])
		if upper && i < len(hs)-1 || capitalized && len(h) < 3 {
			return false // LLaMA, RoBERTa, cBofu's Bo
		}
	}
	first := hs[0]
	return len(hs) == 1 || names || !isLower(first[0]) ||
		len(first) == 1 && !strings.ContainsFunc(strings.Join(hs[1:], ""), isLowerRune)
}

// humps splits letters at camelCase boundaries: before a capital that
// follows a small letter (Deep|Seek), and before the last capital of a
// capital run that a small letter follows (HF|Token). Every hump but the
// first starts with a capital.
func humps(s string) []string {
	var out []string
	start := 0
	for i := 1; i < len(s); i++ {
		if isUpper(s[i]) && (isLower(s[i-1]) || isUpper(s[i-1]) && i+1 < len(s) && isLower(s[i+1])) {
			out = append(out, s[start:i])
			start = i
		}
	}
	return append(out, s[start:])
}

// shortWords are the words of two letters that start compounds people
// name things with (myproj, retrain, unfrozen, toplevel).
var shortWords = map[string]bool{"my": true, "re": true, "un": true, "to": true, "in": true, "on": true, "up": true, "no": true}

// compound reports whether lowercase letters are two words run together,
// each reading like a word (readsLikeWord): the first of 3 letters or more
// or one of shortWords, the second of 3 or more. The letters across the
// seam need not occur in a word (myproj: "ypr"). It lets about 0.7% of
// random 8-letter tokens through, against 0.1% for readsLikeWord, so it
// judges only the values of options (asNamed), where a name a user chose
// is the common case.
func compound(h string) bool {
	for k := 2; k+3 <= len(h); k++ {
		a, b := h[:k], h[k:]
		if (len(a) >= 3 || shortWords[a]) && readsLikeWord(a) && readsLikeWord(b) {
			return true
		}
	}
	return false
}

// wordList holds common English words and the words of training command
// lines (words.txt; its header says how to add one).
//
//go:embed words.txt
var wordList string

// trigrams are the 3-letter sequences of the words in wordList and of
// their forms with endings, built at first use (about 2 ms).
var trigrams = sync.OnceValue(func() map[string]bool {
	t := map[string]bool{}
	for _, line := range strings.Split(wordList, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, w := range strings.Fields(line) {
			for _, e := range endings {
				for f, i := w+e, 0; i+3 <= len(f); i++ {
					t[f[i:i+3]] = true
				}
			}
		}
	}
	return t
})

// endings make the plural and inflected forms of a word (block: blocks,
// blocked, blocking, blocker).
var endings = []string{"", "s", "es", "ed", "ing", "er"}

// readsLikeWord reports whether lowercase letters read like a word: every
// 3 letters in a row of them occur in a word of words.txt. Random letters
// rarely do (qwhzkrtm, gifiebrc); many words the list lacks do (moonlight:
// moo, oon, onl, nli, lig, igh, ght), compounds often do not (lighthouse).
func readsLikeWord(h string) bool {
	for i := 0; i+3 <= len(h); i++ {
		if !trigrams()[h[i:i+3]] {
			return false
		}
	}
	return true
}
