package main

import (
	"math/rand"
	"testing"
)

// Zipf s = 1 draws every rank in [0, n), favours the low ones as 1/k does (rank 0 about
// 1/H_n of the draws: 8.27% for n = 100,000) and reaches the high ones too.
func TestZipfStaysInRangeAndIsSkewed(t *testing.T) {
	const n = 100_000
	z := newZipf(n)
	rng := rand.New(rand.NewSource(1))
	const draws = 200_000
	var zero, low, high int
	for i := 0; i < draws; i++ {
		r := z.rank0(rng)
		if r >= n {
			t.Fatalf("rank %d out of [0, %d)", r, n)
		}
		switch {
		case r == 0:
			zero++
		case r < 10:
			low++
		case r >= n/2:
			high++
		}
	}
	// P(rank 0) = 1/H_n = 0.0827 (H_n = 12.090); P(1..9) = (H_10 - 1)/H_n = 0.1595; P(>= n/2) ≈ ln 2 / H_n = 0.0573.
	for _, c := range []struct {
		what      string
		got       int
		want, tol float64
	}{{"rank 0", zero, 0.0827, 0.004}, {"ranks 1-9", low, 0.1595, 0.004}, {"upper half", high, 0.0573, 0.004}} {
		share := float64(c.got) / draws
		if share < c.want-c.tol || share > c.want+c.tol {
			t.Errorf("%s: %.4f of the draws, want %.4f ± %.3f", c.what, share, c.want, c.tol)
		}
	}
}
