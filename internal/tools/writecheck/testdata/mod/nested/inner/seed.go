package inner

// Another module (a benchmark seeding records): not checked.
func seed(db database) { db.Collection("job_runs").InsertMany(ctx, docs) }
