package runstore

func (s *Store) write() {
	s.runs.InsertMany(ctx, docs) // the owner
	s.db.Collection(record.LocksCollection).UpdateOne(ctx, f, u)
}
