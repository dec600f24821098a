package stragglerprocessor

import "time"

// jobCohorts remembers which communicator each job's ranks were seen in, so that a rank
// whose node never saw the communicator being created (the node collector started after
// the job, with no kernel state to adopt) is still compared with the rest of its job
// instead of forming a cohort of its own. A job seen in two communicators is ambiguous
// (two jobs under one name: torchrun's default run id is "none") and maps to nothing.
//
// Such a node may name the communicator itself, from its calls (a recovered cohort):
// the name differs from the one of the unique id the other nodes saw, so a communicator
// named by its unique id wins over a recovered one, which does not make the job
// ambiguous; a recovered one serves while no other is known.
type jobCohorts struct {
	max   int
	byJob map[cohortKey]jobCohort // cohort holds the job's name here
}

type jobCohort struct {
	cohort    string // "" once ambiguous
	recovered bool   // cohort (or the ambiguity) is of recovered communicators only
	seen      time.Time
}

func newJobCohorts(max int) *jobCohorts {
	return &jobCohorts{max: max, byJob: map[cohortKey]jobCohort{}}
}

// learn records that a rank of job was seen in cohort, a recovered one or not. At the
// bound, the job heard of least recently is forgotten.
func (j *jobCohorts) learn(cluster, job, cohort string, recovered bool, now time.Time) {
	key := cohortKey{cluster: cluster, cohort: job}
	if known, ok := j.byJob[key]; ok {
		switch {
		case known.recovered && !recovered:
			known.cohort, known.recovered = cohort, false
		case !known.recovered && recovered:
		case known.cohort != cohort:
			known.cohort = ""
		}
		known.seen = now
		j.byJob[key] = known
		return
	}
	if len(j.byJob) >= j.max {
		var oldest cohortKey
		first := true
		for k, v := range j.byJob {
			if first || v.seen.Before(j.byJob[oldest].seen) {
				oldest, first = k, false
			}
		}
		delete(j.byJob, oldest)
	}
	j.byJob[key] = jobCohort{cohort: cohort, recovered: recovered, seen: now}
}

// resolve returns the communicator cohort of job, or "" when none (or more than one) is
// known.
func (j *jobCohorts) resolve(cluster, job string) string {
	return j.byJob[cohortKey{cluster: cluster, cohort: job}].cohort
}

// forget drops the jobs not heard of since before.
func (j *jobCohorts) forget(before time.Time) {
	for k, v := range j.byJob {
		if v.seen.Before(before) {
			delete(j.byJob, k)
		}
	}
}
