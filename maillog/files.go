package maillog

// ReadFiles returns a Reader of opts that has read the logs at paths, in
// order; it stops at the first file that cannot be read.
func ReadFiles(opts Options, paths ...string) (*Reader, error) {
	r := NewReader(opts)
	for _, p := range paths {
		if err := r.ReadFile(p); err != nil {
			return nil, err
		}
	}
	return r, nil
}
