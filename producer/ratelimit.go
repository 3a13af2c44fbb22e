package producer

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiter is a token bucket per principal (a token's issuer, org and
// subject), for mutations per second.
// Buckets idle for long are dropped so that the map stays small.
type limiter struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	l    *rate.Limiter
	used time.Time
}

func newLimiter(perSecond float64, burst int) *limiter {
	return &limiter{rate: rate.Limit(perSecond), burst: burst, buckets: map[string]*bucket{}}
}

// allow takes n tokens for the principal's key at now, or says how long to wait.
// A request larger than the burst can never pass: it is cut to the burst,
// which the batch limit keeps far above a sane push.
func (l *limiter) allow(principal string, n int, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > time.Minute {
		for k, b := range l.buckets {
			if now.Sub(b.used) > 10*time.Minute {
				delete(l.buckets, k)
			}
		}
		l.swept = now
	}
	b := l.buckets[principal]
	if b == nil {
		b = &bucket{l: rate.NewLimiter(l.rate, l.burst)}
		l.buckets[principal] = b
	}
	b.used = now
	n = min(n, l.burst)
	r := b.l.ReserveN(now, n)
	if !r.OK() {
		return time.Second, false
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, false
	}
	return 0, true
}
