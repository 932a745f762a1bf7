package gpu

import (
	"reflect"
	"strings"
	"testing"
)

var testDevs = []devInfo{
	{Index: 0, UUID: "GPU-aaaa0000-0000-0000-0000-000000000000"},
	{Index: 1, UUID: "GPU-bbbb1111-0000-0000-0000-000000000000"},
	{Index: 2, UUID: "GPU-cccc2222-0000-0000-0000-000000000000",
		Slices: []string{"MIG-dddd3333-0000-0000-0000-000000000000", "MIG-eeee4444-0000-0000-0000-000000000000"}},
}

func TestParseSelect(t *testing.T) {
	got, err := parseSelect([]string{" 1", "", "GPU-aaaa0000-0000-0000-0000-000000000000", "MIG-x"})
	if err != nil {
		t.Fatal(err)
	}
	want := []selector{
		{raw: "1", index: 1},
		{raw: "GPU-aaaa0000-0000-0000-0000-000000000000", index: -1, uuid: "GPU-aaaa0000-0000-0000-0000-000000000000"},
		{raw: "MIG-x", index: -1, uuid: "MIG-x"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"-1", "gpu0", "cuda:0", "aaaa0000"} {
		if _, err := parseSelect([]string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("parseSelect(%q) err = %v, want one naming the entry", bad, err)
		}
	}
}

func TestChoose(t *testing.T) {
	sel := func(s ...string) []selector {
		out, err := parseSelect(s)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	tests := []struct {
		name      string
		sels      []selector
		matchCUDA bool
		cuda      string
		want      choice
		note      string // a note that must be given; "" = no notes
	}{
		{name: "everything", want: choice{0: nil, 1: nil, 2: nil}},
		{name: "by index", sels: sel("1", "2"), want: choice{1: nil, 2: nil}},
		{name: "by UUID, any case", sels: sel("GPU-BBBB1111-0000-0000-0000-000000000000"), want: choice{1: nil}},
		{name: "a MIG slice by UUID", sels: sel("MIG-eeee4444-0000-0000-0000-000000000000"),
			want: choice{2: {"MIG-eeee4444-0000-0000-0000-000000000000": true}}},
		{name: "slice then its whole GPU", sels: sel("MIG-eeee4444-0000-0000-0000-000000000000", "2"), want: choice{2: nil}},
		{name: "index with no GPU", sels: sel("0", "7"), want: choice{0: nil}, note: `no GPU matches selection "7"`},
		{name: "selection needs the full UUID", sels: sel("GPU-aaaa"), want: choice{}, note: `no GPU matches selection "GPU-aaaa"`},
		{name: "CUDA_VISIBLE_DEVICES by UUID prefix", matchCUDA: true, cuda: "GPU-bbbb1111,GPU-aaaa0000-0000-0000-0000-000000000000",
			want: choice{0: nil, 1: nil}},
		{name: "CUDA_VISIBLE_DEVICES MIG slice", matchCUDA: true, cuda: "MIG-dddd3333-0000-0000-0000-000000000000",
			want: choice{2: {"MIG-dddd3333-0000-0000-0000-000000000000": true}}},
		{name: "CUDA_VISIBLE_DEVICES legacy MIG name", matchCUDA: true, cuda: "MIG-GPU-cccc2222-0000-0000-0000-000000000000/1/0",
			want: choice{2: nil}},
		{name: "CUDA_VISIBLE_DEVICES indexes are not matched", matchCUDA: true, cuda: "0,1",
			want: choice{0: nil, 1: nil, 2: nil}, note: "names no UUID"},
		{name: "CUDA_VISIBLE_DEVICES unset", matchCUDA: true, want: choice{0: nil, 1: nil, 2: nil}, note: "not set"},
		{name: "CUDA_VISIBLE_DEVICES ignored unless asked", cuda: "GPU-bbbb1111", want: choice{0: nil, 1: nil, 2: nil}},
		{name: "selection and CUDA_VISIBLE_DEVICES intersect", sels: sel("0", "1"), matchCUDA: true, cuda: "GPU-bbbb,GPU-cccc",
			want: choice{1: nil}},
		{name: "CUDA_VISIBLE_DEVICES UUID of another node", matchCUDA: true, cuda: "GPU-ffff",
			want: choice{}, note: `no GPU matches CUDA_VISIBLE_DEVICES entry "GPU-ffff"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, notes := choose(testDevs, tt.sels, tt.matchCUDA, tt.cuda)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("choice %v, want %v", got, tt.want)
			}
			joined := strings.Join(notes, "; ")
			if tt.note == "" && len(notes) > 0 {
				t.Errorf("unexpected notes: %s", joined)
			}
			if tt.note != "" && !strings.Contains(joined, tt.note) {
				t.Errorf("notes %q, want one containing %q", joined, tt.note)
			}
		})
	}
}
