package cronswap.testmongo;

import java.util.List;

import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.Index;
import de.bwaldvogel.mongo.backend.IndexKey;
import de.bwaldvogel.mongo.backend.memory.MemoryDatabase;
import de.bwaldvogel.mongo.backend.memory.index.MemoryUniqueIndex;
import de.bwaldvogel.mongo.bson.Document;

/**
 * Lets the in-memory backend use a single-field unique index (the {@code _id} index above all) for a filter that
 * names that field beside other conditions, as a server does. The library uses an index only when the filter's keys
 * are exactly the index's, so {@code {_id: X, status: "running"}} — every conditional update of the fire path —
 * scanned the whole collection, one document at a time, for each operation of a bulk write. The index now narrows
 * the candidates by the field alone; the whole filter is still applied to each candidate by the library's matcher,
 * so what matches is unchanged.
 */
final class PointLookupIndexes {
    private PointLookupIndexes() {
    }

    /** A database whose single-field unique indexes serve filters with more conditions. */
    static final class Database extends MemoryDatabase {
        Database(String name, CursorRegistry cursors) {
            super(name, cursors);
        }

        @Override
        protected Index<Integer> openOrCreateUniqueIndex(String collectionName, String indexName, List<IndexKey> keys,
                                                         boolean sparse) {
            if (keys.size() != 1) {
                return super.openOrCreateUniqueIndex(collectionName, indexName, keys, sparse);
            }
            return new UniqueIndex(indexName, keys, sparse);
        }
    }

    /** A single-field unique index that also handles a filter with other conditions beside its field. */
    static final class UniqueIndex extends MemoryUniqueIndex {
        private final String field;

        UniqueIndex(String name, List<IndexKey> keys, boolean sparse) {
            super(name, keys, sparse);
            this.field = keys.get(0).getKey();
        }

        /** The filter narrowed to the index's field, or null when the filter does not name it. */
        private Document narrowed(Document query) {
            if (query.size() <= 1 || !query.containsKey(field)) {
                return null;
            }
            return new Document(field, query.get(field));
        }

        @Override
        public synchronized boolean canHandle(Document query) {
            if (super.canHandle(query)) {
                return true;
            }
            Document narrow = narrowed(query);
            return narrow != null && super.canHandle(narrow);
        }

        @Override
        public synchronized Iterable<Integer> getPositions(Document query) {
            Document narrow = narrowed(query);
            if (narrow != null && !super.canHandle(query) && super.canHandle(narrow)) {
                return super.getPositions(narrow);
            }
            return super.getPositions(query);
        }
    }
}
