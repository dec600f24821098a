package echotools

import (
	"strings"
	"time"
)

const defaultWindow = time.Hour

// window resolves since/until (RFC 3339, or a Go duration before until such as "15m"
// for since) into a half-open range [since, until).
func window(env *Env, since, until string) (time.Time, time.Time, error) {
	end := env.Now().UTC()
	if until != "" {
		t, err := time.Parse(time.RFC3339Nano, until)
		if err != nil {
			return time.Time{}, time.Time{}, invalid("until %q is not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)", until)
		}
		end = t.UTC()
	}
	start := end.Add(-defaultWindow)
	if since != "" {
		if d, err := time.ParseDuration(since); err == nil && d > 0 && !strings.ContainsAny(since, "T:") {
			start = end.Add(-d)
		} else if t, err := time.Parse(time.RFC3339Nano, since); err == nil {
			start = t.UTC()
		} else {
			return time.Time{}, time.Time{}, invalid("since %q is neither an RFC 3339 time nor a duration such as 15m", since)
		}
	}
	if !start.Before(end) {
		return time.Time{}, time.Time{}, invalid("since (%s) must be before until (%s)", start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	return start, end, nil
}

// filter builds a parameterised WHERE clause; user values only ever travel as args.
type filter struct {
	conds []string
	args  []any
}

func (f *filter) add(cond string, args ...any) {
	f.conds = append(f.conds, cond)
	f.args = append(f.args, args...)
}

func (f *filter) addIf(ok bool, cond string, args ...any) {
	if ok {
		f.add(cond, args...)
	}
}

func (f *filter) sql() string {
	if len(f.conds) == 0 {
		return "TRUE"
	}
	return strings.Join(f.conds, " AND ")
}

// nameFilter matches a metric/event name exactly, or by prefix with a trailing '*'.
func (f *filter) name(name string) {
	if name == "" {
		return
	}
	if p, ok := strings.CutSuffix(name, "*"); ok {
		f.add("starts_with(name, ?)", p)
		return
	}
	f.add("name = ?", name)
}
