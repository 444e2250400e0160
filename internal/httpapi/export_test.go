package httpapi

// Routes returns the patterns New(o) mounts.
func Routes(o Options) []string {
	if o.Events == nil {
		o.Events = NewBroker(BrokerOptions{})
	}
	_, p := newMux(&api{o: o, creds: credentials(o)})
	return p
}
