package metrics

import "unsafe"

// What a sample and each of its points take in memory besides the names:
// a point is its Point, and up to 24 more bytes for the rounding of the
// allocations of the points (1/8) and of its name (15 bytes).
const (
	sampleSize = int64(unsafe.Sizeof(Sample{}))
	pointSize  = int64(unsafe.Sizeof(Point{})) + 24
)

// MemBytes is about what the sample holds in memory, a little over: its
// points and their names. A name is counted whole even where a descriptor
// shares it among samples: the count bounds what a sample can hold, and
// queues of samples are bounded by it (the session's queue, the spool's
// buffers and the batches it reads back).
func (s *Sample) MemBytes() int64 {
	n := sampleSize + int64(len(s.Points))*pointSize
	for i := range s.Points {
		n += int64(len(s.Points[i].Name()))
	}
	return n
}
