package lines

// GETPath is where the gateway serves a cohort's lines and where the node asks, below
// the endpoint (as otlp_http appends /v1/metrics).
const GETPath = "/v1/thresholds"

// NoLinesFor opens every 404 the gateway's thresholds server writes for a cohort it has
// no line of, so that the node tells "no line yet" from a wrong endpoint's 404.
const NoLinesFor = "no thresholds for "
