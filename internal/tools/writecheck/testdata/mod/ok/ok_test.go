package ok

func seed(db database) {
	db.Collection(record.RunsCollection).InsertOne(ctx, d) // tests may seed records
}
