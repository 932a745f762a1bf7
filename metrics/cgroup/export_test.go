package cgroup

// ReprobeRounds is how many samples a missing file is believed missing, for
// the external tests.
const ReprobeRounds = reprobeRounds
