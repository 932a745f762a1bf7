package scrape

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"unique"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bridge-dev/bridge/metrics"
)

// chunkBytes is how much text the parser gets at a time. Its objects for
// one chunk (about 100 bytes a series, more for labels) are all the
// memory an answer's unkept series ever take.
const chunkBytes = 16 << 10

// read parses one answer as a stream and maps it, within the bounds.
// prometheus/common's text parser reads a whole input into one map (its
// Decoder too), so it is given the answer a chunk of whole lines at a
// time; a chunk that continues a family begins with that family's # TYPE
// line, so every line is parsed as the whole answer would have it (a
// histogram's _bucket lines stay a histogram's, and are skipped).
func (c *Collector) read(r io.Reader, t *target) (*answer, error) {
	if t.reader == nil {
		t.reader = &reader{br: bufio.NewReaderSize(r, maxLineBytes), p: expfmt.NewTextParser(model.UTF8Validation)}
	}
	br, p, chunk := t.reader.br, &t.reader.p, &t.reader.chunk
	br.Reset(r)
	defer br.Reset(nil) // keep no answer's body
	chunk.Reset()
	a := &answer{c: c, t: t, seen: map[unique.Handle[string]]*metrics.Desc{}}
	var typeLine []byte
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return nil, fmt.Errorf("%w: a line longer than %d KiB", errTooLarge, maxLineBytes>>10)
		case err != nil && err != io.EOF:
			return nil, err
		}
		if isTypeLine(line) {
			typeLine = append(typeLine[:0], line...)
		}
		chunk.Write(line)
		if chunk.Len() >= chunkBytes || err == io.EOF {
			fams, perr := p.TextToMetricFamilies(chunk)
			if perr != nil {
				return nil, fmt.Errorf("parsing the Prometheus text format: %w", perr)
			}
			if aerr := a.add(fams); aerr != nil {
				return a, aerr
			}
			chunk.Reset()
			chunk.Write(typeLine)
		}
		if err == io.EOF {
			return a, nil
		}
	}
}

// reader is what reading an answer needs, kept between a URL's answers so
// that a scrape allocates none of it again (only the request in flight
// uses it).
type reader struct {
	br    *bufio.Reader
	p     expfmt.TextParser
	chunk bytes.Buffer
}

// isTypeLine reports whether line is a "# TYPE" comment (blanks and tabs
// allowed where the parser allows them).
func isTypeLine(line []byte) bool {
	rest, ok := bytes.CutPrefix(bytes.TrimLeft(line, " \t"), []byte("#"))
	if !ok {
		return false
	}
	rest, ok = bytes.CutPrefix(bytes.TrimLeft(rest, " \t"), []byte("TYPE"))
	return ok && len(rest) > 0 && (rest[0] == ' ' || rest[0] == '\t')
}

// answer is what one answer has kept so far.
type answer struct {
	c          *Collector
	t          *target
	points     []metrics.Point
	labelBytes int                                     // names and labels of the kept series
	seen       map[unique.Handle[string]]*metrics.Desc // keys kept: a repeated series counts once
	fresh      int                                     // kept keys the URL had not added before
	long       int                                     // series left out for maxKeyLength
	overKeys   int                                     // series left out for maxKeys
	// longExample is the start of one key left out for its length.
	longExample string
}

// add maps one chunk's families, in name order, and checks the bounds.
func (a *answer) add(fams map[string]*dto.MetricFamily) error {
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	o := a.c.o
	for _, n := range names {
		if o.Include != nil && !o.Include.MatchString(n) {
			continue
		}
		if o.Exclude != nil && o.Exclude.MatchString(n) {
			continue
		}
		f := fams[n]
		for _, m := range f.GetMetric() {
			v, ok := value(f.GetType(), m)
			if !ok {
				continue
			}
			labels := make(map[string]string, len(m.GetLabel()))
			size := len(n)
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
				size += len(lp.GetName()) + len(lp.GetValue())
			}
			s, mapped, ok := a.c.dcgm(n, labels, v)
			switch {
			case ok:
				v = mapped
			case isDCGM(n):
				continue // a DCGM series of another pod, or one bridge does not map
			case o.Passthrough:
				s = series{key: passName(n, labels), gpu: -1}
			default:
				continue
			}
			if err := a.keep(s, v, size); err != nil {
				return err
			}
		}
	}
	return nil
}

// keep adds the value v of series s, whose names and labels are size
// bytes. A key the URL added before keeps its descriptor; a new one gets
// one, within maxKeys.
func (a *answer) keep(s series, v float64, size int) error {
	if len(s.key) > maxKeyLength {
		a.long++
		a.longExample = strings.ToValidUTF8(s.key[:64], "") + "..."
		return nil
	}
	h := unique.Make(s.key)
	if _, dup := a.seen[h]; dup {
		return nil
	}
	d, known := a.t.keys[h]
	if !known {
		if len(a.t.keys)+a.fresh >= maxKeys {
			a.overKeys++
			return nil
		}
		a.fresh++
		d = s.desc()
	}
	if len(a.points) == maxSeries {
		return fmt.Errorf("%w: more than %d series kept", errTooLarge, maxSeries)
	}
	if a.labelBytes += size; a.labelBytes > maxLabelBytes {
		return fmt.Errorf("%w: more than %d MiB of names and labels in the series kept", errTooLarge, maxLabelBytes>>20)
	}
	a.seen[h] = d
	a.points = append(a.points, metrics.At(d, v))
	return nil
}

func value(t dto.MetricType, m *dto.Metric) (float64, bool) {
	var v float64
	switch t {
	case dto.MetricType_GAUGE:
		v = m.GetGauge().GetValue()
	case dto.MetricType_COUNTER:
		v = m.GetCounter().GetValue()
	case dto.MetricType_UNTYPED:
		v = m.GetUntyped().GetValue()
	default:
		return 0, false // histograms and summaries: no single value
	}
	// NaN and the infinities are left out, and counted, by the Sampler's
	// range check, as every collector's values.
	return v, true
}
