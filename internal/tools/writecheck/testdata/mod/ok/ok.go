package ok

// Reads of the fire path's collections, and writes of others: no report.

func reads(db database) {
	db.Collection(record.RunsCollection).Find(ctx, f)
	locks, runs := record.Collections(db)
	locks.FindOne(ctx, f)
	runs.CountDocuments(ctx, f)
	runs.Indexes().CreateMany(ctx, ix) // an index, not a document
	db.Collection("schedules").UpdateOne(ctx, f, u)
	coll := db.Collection(schedule.CollectionName)
	coll.DeleteOne(ctx, f)
	store.ReleaseLock(ctx, "j", 1, now) // through the store
}
