package series

import (
	"math"
	"slices"
)

// MADScale makes the median absolute deviation a consistent estimator of the standard
// deviation for normal data, so that a threshold of k scaled MADs reads as "k standard
// deviations".
const MADScale = 1.4826

// Median is the median of values (the mean of the middle two for an even count), NaN
// for none. It sorts values in place.
func Median(values []float64) float64 {
	n := len(values)
	if n == 0 {
		return math.NaN()
	}
	slices.Sort(values)
	if n%2 == 1 {
		return values[n/2]
	}
	return (values[n/2-1] + values[n/2]) / 2
}

// MAD is the median absolute deviation of values from median. It overwrites values
// with the deviations.
func MAD(values []float64, median float64) float64 {
	for i, v := range values {
		values[i] = math.Abs(v - median)
	}
	return Median(values)
}
