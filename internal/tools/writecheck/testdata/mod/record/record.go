package record

// Inside package record the functions are named bare.
func repairAll(db database) {
	Collections(db)
	_, runs := Collections(db)
	runs.UpdateMany(ctx, f, u) // line 7
}
