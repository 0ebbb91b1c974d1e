package memory

/*
// -O3 lets gcc vectorise the loop below (SSE2 on any amd64, NEON on arm64): one query
// against 75,000 codes of 256 bytes takes about 2 ms here, against 13 ms for the same
// loop in Go and 16 ms for sqlite-vec's int8 search, whose distance adds in float one
// element after another.
#cgo CFLAGS: -O3
#include <stddef.h>
#include <stdint.h>

static void istota_sqdist8(const int8_t *codes, const int8_t *q, size_t n, size_t dim, int32_t *out) {
	for (size_t j = 0; j < n; j++) {
		const int8_t *c = codes + j * dim;
		int32_t sum = 0;
		for (size_t i = 0; i < dim; i++) {
			int32_t d = (int32_t)c[i] - (int32_t)q[i];
			sum += d * d;
		}
		out[j] = sum;
	}
}
*/
import "C"

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// squaredDistances writes to out[j] the squared euclidean distance between q and the
// j-th code of codes (len(q) bytes each). The largest possible sum, 8192 dimensions of
// 254², fits an int32.
func squaredDistances(codes, q []int8, out []int32) {
	dim := len(q)
	if dim == 0 || len(codes) == 0 {
		return
	}
	n := len(codes) / dim
	if len(out) < n {
		panic("memory: squaredDistances: out too short")
	}
	C.istota_sqdist8((*C.int8_t)(unsafe.Pointer(&codes[0])), (*C.int8_t)(unsafe.Pointer(&q[0])),
		C.size_t(n), C.size_t(dim), (*C.int32_t)(unsafe.Pointer(&out[0])))
}

// quantize writes the int8 code of the unit vector v to out: each component times 127,
// rounded, so that squared distances between codes order vectors as their cosine
// similarity does, up to the rounding.
func quantize(v []float32, out []int8) {
	for i, x := range v {
		out[i] = quantizeOne(x)
	}
}

// quantizeEncoded is quantize of a vector as encodeVector stores it, read in place
// (loading a namespace reads every stored vector and must not allocate for each).
func quantizeEncoded(b []byte, out []int8) {
	for i := range out {
		out[i] = quantizeOne(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
}

func quantizeOne(x float32) int8 {
	q := float64(x) * 127
	switch {
	case q >= 127:
		return 127
	case q <= -127:
		return -127
	case q != q: // NaN: a broken component counts as nothing rather than anything
		return 0
	case q < 0:
		return int8(q - 0.5)
	}
	return int8(q + 0.5)
}
