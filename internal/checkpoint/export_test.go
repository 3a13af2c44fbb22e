package checkpoint

import "time"

// SetBeforeManifest sets the hook Take runs between the files and the
// manifest (a crash during upload).
func (o *TakeOptions) SetBeforeManifest(fn func() error) { o.beforeManifest = fn }

// SetClock sets the clock retention uses.
func (c *Config) SetClock(now func() time.Time) { c.now = now }
