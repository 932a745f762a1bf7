package memtrim

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const fixture = `00400000-00411000 r--p 00000000 fe:00 1234   /opt/bridge/bin/bridge
Size:                 68 kB
Anonymous:             0 kB
VmFlags: rd mr mw me
00411000-00a05000 r-xp 00011000 fe:00 1234   /opt/bridge/bin/bridge
Anonymous:             0 kB
00a05000-010b9000 r--p 00605000 fe:00 1234   /opt/bridge/bin/bridge
Anonymous:             4 kB
010b9000-01129000 rw-p 00cb8000 fe:00 1234   /opt/bridge/bin/bridge
Anonymous:           112 kB
0112a000-0316f000 rw-p 00000000 00:00 0
Anonymous:           100 kB
7f0000000000-7f0000010000 r-xp 00000000 fe:00 99     /data/my dir/lib.so
Anonymous:             0 kB
Swap:                  0 kB
7f0000008000-7f0000009000 r--p 00008000 fe:00 99     /data/my dir/lib.so
Anonymous:             0 kB
Swap:                  4 kB
7f0000010000-7f0000020000 r--s 00000000 fe:00 98     /dev/shm/shared
Anonymous:             0 kB
7f0000020000-7f0000030000 r-xp 00000000 fe:00 97     /tmp/old (deleted)
Anonymous:             0 kB
7f0000030000-7f0000040000 r--p 00000000 fe:00 97     /srv/97 fe:00 x
Anonymous:             0 kB
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0      [vdso]
Anonymous:             0 kB
`

func TestParseSmaps(t *testing.T) {
	maps, err := ParseSmaps(strings.NewReader(fixture))
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		start    uintptr
		path     string
		anon     int64
		eligible bool
	}
	wants := []want{
		{0x400000, "/opt/bridge/bin/bridge", 0, true},
		{0x411000, "/opt/bridge/bin/bridge", 0, true},
		{0xa05000, "/opt/bridge/bin/bridge", 4, false}, // a copied (relocated) page
		{0x10b9000, "/opt/bridge/bin/bridge", 112, false},
		{0x112a000, "", 100, false},
		{0x7f0000000000, "/data/my dir/lib.so", 0, true},
		{0x7f0000008000, "/data/my dir/lib.so", 0, false}, // a copied page swapped out
		{0x7f0000010000, "/dev/shm/shared", 0, false},     // shared
		{0x7f0000020000, "/tmp/old (deleted)", 0, false},
		{0x7f0000030000, "/srv/97 fe:00 x", 0, true}, // fields repeated in the path
		{0x7ffd00000000, "[vdso]", 0, false},
	}
	if len(maps) != len(wants) {
		t.Fatalf("got %d mappings, want %d: %+v", len(maps), len(wants), maps)
	}
	for i, w := range wants {
		m := maps[i]
		if m.Start != w.start || m.Path != w.path || m.Anonymous != w.anon || m.Eligible() != w.eligible {
			t.Errorf("mapping %d: got %+v eligible=%v, want %+v", i, m, m.Eligible(), w)
		}
	}
	if _, err := ParseSmaps(strings.NewReader("00400000-00411000 r--p 0 fe:00 1 /x\nAnonymous: many kB\n")); err == nil {
		t.Error("a bad Anonymous line parsed without error")
	}
}

// TestTrim runs Trim on the test process itself: the read-only mappings of
// files are advised (VmFlags "rr") and read back the same, and a private page
// that was copied on write and then made read-only, as ld.so does with
// relocations, keeps its written bytes.
func TestTrim(t *testing.T) {
	page := os.Getpagesize()
	dir := t.TempDir()
	file := bytes.Repeat([]byte("file"), 2*page/4)
	copied := filepath.Join(dir, "copied")
	plain := filepath.Join(dir, "plain")
	for _, p := range []string{copied, plain} {
		if err := os.WriteFile(p, file, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cm := mapFile(t, copied, unix.PROT_READ|unix.PROT_WRITE)
	copy(cm, "written in memory")
	if err := unix.Mprotect(cm, unix.PROT_READ); err != nil {
		t.Fatal(err)
	}
	pm := mapFile(t, plain, unix.PROT_READ)
	_ = pm[page] // resident

	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	text := exeText(t, exe)
	before := readMem(t, text, 64<<10)

	if err := WriteBack(); err != nil {
		t.Fatal(err)
	}
	res, err := Trim()
	if err != nil {
		t.Fatal(err)
	}
	if res.Mappings == 0 || res.Bytes == 0 {
		t.Fatalf("Trim advised nothing: %+v", res)
	}
	if !bytes.HasPrefix(cm, []byte("written in memory")) {
		t.Fatalf("the copied page lost its bytes: %q", cm[:20])
	}
	if !bytes.Equal(pm, file) {
		t.Fatal("the plain mapping reads differently after Trim")
	}
	if after := readMem(t, text, 64<<10); !bytes.Equal(before, after) {
		t.Fatal("the executable's code reads differently after Trim")
	}
	flags := vmFlags(t)
	for addr, want := range map[uintptr]bool{
		addrOf(pm): true,  // a plain read-only file mapping: advised
		text:       true,  // the test binary's code
		addrOf(cm): false, // copied on write: left alone
	} {
		if got := strings.Contains(" "+flags[addr]+" ", " rr "); got != want {
			t.Errorf("mapping at %#x: VmFlags %q, random-read advice %v, want %v", addr, flags[addr], got, want)
		}
	}
}

func mapFile(t *testing.T, path string, prot int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), prot, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// exeText is the start of the executable's code mapping.
func exeText(t *testing.T, exe string) uintptr {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	maps, err := ParseSmaps(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.Path == exe && m.Perms == "r-xp" {
			return m.Start
		}
	}
	t.Fatalf("no r-xp mapping of %s", exe)
	return 0
}

// readMem reads n bytes of this process's memory at addr (through
// /proc/self/mem, as a debugger does, whatever is mapped there).
func readMem(t *testing.T, addr uintptr, n int) []byte {
	t.Helper()
	f, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, int64(addr)); err != nil {
		t.Fatal(err)
	}
	return b
}

// vmFlags maps each region's start to its VmFlags line.
func vmFlags(t *testing.T) map[uintptr]string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	out := map[uintptr]string{}
	var cur uintptr
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := parseHeader([]byte(line)); ok {
			cur = m.Start
		} else if v, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			out[cur] = strings.TrimSpace(v)
		}
	}
	return out
}

// FuzzParseSmaps: any input parses or fails cleanly, and a region judged
// eligible is a private, read-only file mapping with no copied pages.
func FuzzParseSmaps(f *testing.F) {
	f.Add(fixture)
	f.Add("00400000-00411000 r--p 0 fe:00 1\n")
	f.Add("1-2 r--p 0 0 0 /a b\nAnonymous: 0 kB\nSwap: x\n")
	f.Fuzz(func(t *testing.T, s string) {
		maps, err := ParseSmaps(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, m := range maps {
			if m.Eligible() && (m.Perms[1] != '-' || m.Perms[3] != 'p' || m.Anonymous != 0 || m.Swap != 0 ||
				!strings.HasPrefix(m.Path, "/") || m.End <= m.Start) {
				t.Fatalf("eligible: %+v", m)
			}
		}
	})
}
