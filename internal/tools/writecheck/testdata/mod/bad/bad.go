package bad

// Each write below is of a fire-path collection outside internal/runstore.

type store struct {
	db     database
	runs   collection
	locked collection
	other  collection
}

func direct(s store) {
	s.db.Collection(record.LocksCollection).UpdateOne(ctx, f, u) // line 13
	s.db.Collection("job_pauses").DeleteMany(ctx, f)             // line 14
	record.PausesCollectionOf(s.db).ReplaceOne(ctx, f, d)        // line 15
}

func twoSteps(s store) {
	coll := s.db.Collection(record.RunsCollection)
	coll.InsertOne(ctx, d) // line 20
	locks, runs := record.Collections(s.db)
	locks.BulkWrite(ctx, ms) // line 22
	var p = record.PausesCollectionOf(s.db)
	p.FindOneAndUpdate(ctx, f, u) // line 24
}

func fields(s store) {
	s.runs.DeleteOne(ctx, f) // line 28: a conventional name
	t := store{locked: s.db.Collection(record.LocksCollection)}
	t.locked.UpdateMany(ctx, f, u) // line 30
	(s.other).Drop(ctx)            // not a handle: no report
}

func pausesColl(s store) collection { return record.PausesCollectionOf(s.db) }

func viaFunc(s store) {
	pausesColl(s).UpdateOne(ctx, f, u) // line 37
}
