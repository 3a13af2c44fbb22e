package bundle

// LiveEngines is the number of engine instances not closed yet.
func LiveEngines() int64 { return liveEngines.Load() }
