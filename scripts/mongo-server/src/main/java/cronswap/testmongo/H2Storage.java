package cronswap.testmongo;

import java.util.Set;
import java.util.function.Supplier;

import org.h2.mvstore.MVMap;
import org.h2.mvstore.MVStore;

import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.backend.ArrayFilters;
import de.bwaldvogel.mongo.backend.CollectionOptions;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.h2.H2Backend;
import de.bwaldvogel.mongo.backend.h2.H2Collection;
import de.bwaldvogel.mongo.backend.h2.H2Database;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.oplog.Oplog;

/**
 * The H2 (MVStore file) backend: the library's storage and indexes, a {@link ChangeStreamOplog} kept in the file with
 * the data, and collections that report their committed writes to it ({@link CommittedWrites}), as
 * {@link IndexedMemory} does in memory.
 */
final class H2Storage extends H2Backend implements CompatBackend.Internals {
    /** The map names H2Database gives a collection's documents and its metadata (private there). */
    private static final String DATA_PREFIX = "databases.";
    private static final String META_PREFIX = "meta.";

    private final int oplogMaxEntries;

    /** Opens (or creates) file; oplogMaxEntries bounds the oplog (0: unbounded). */
    H2Storage(String file, int oplogMaxEntries) {
        super(open(file));
        this.oplogMaxEntries = oplogMaxEntries;
    }

    /**
     * How long the MVStore keeps a chunk it no longer needs before it reuses the space, in milliseconds. Its default,
     * 45 s, is meant for a disk that may not have flushed a commit yet after a power loss; with a commit for every
     * write it keeps 45 s of rewritten pages, so a burst of writes grows the file by hundreds of megabytes (20,000
     * inserts and 20,000 updates of job_runs-sized records at about 100 a second: 849 MB at 45 s, 136 MB at 1 s, of
     * which 46 MB live). A server process that is killed loses nothing either way: the operating system has every
     * commit; a power loss may cost the last second.
     */
    private static final int RETENTION_MILLIS = 1000;

    private static MVStore open(String file) {
        MVStore store = new MVStore.Builder().fileName(file).open();
        store.setRetentionTime(RETENTION_MILLIS);
        return store;
    }

    @Override
    protected MongoDatabase openOrCreateDatabase(String databaseName) {
        return new Database(databaseName);
    }

    @Override
    protected Oplog createOplog() {
        return ChangeStreamOplog.open(this, getCursorRegistry(), true, oplogMaxEntries);
    }

    @Override
    public ChangeStreamOplog changeStreamOplog() {
        return oplog instanceof ChangeStreamOplog ? (ChangeStreamOplog) oplog : null;
    }

    @Override
    public CursorRegistry cursors() {
        return getCursorRegistry();
    }

    @Override
    public Set<String> databaseNames() {
        return Set.copyOf(listDatabaseNames());
    }

    @Override
    public void afterWrite() {
        commit();
    }

    @Override
    public void close() {
        commit();
        super.close();
    }

    /**
     * An H2 database whose collections are {@link Collection}s. An inner class: H2Database's constructor opens the
     * existing collections, before a field of this class could hold the store or the oplog.
     */
    final class Database extends H2Database {
        Database(String name) {
            super(name, getMvStore(), getCursorRegistry());
        }

        @Override
        protected MongoCollection<Object> openOrCreateCollection(String collectionName, CollectionOptions options) {
            String fullName = getFullCollectionNamespace(collectionName);
            MVMap<Object, Document> data = getMvStore().openMap(DATA_PREFIX + fullName);
            MVMap<String, Object> meta = getMvStore().openMap(META_PREFIX + fullName);
            return new Collection(this, collectionName, options, data, meta, cursorRegistry,
                H2Storage.this::changeStreamOplog);
        }
    }

    /** An H2 collection that reports each write to the oplog as it applies it. */
    static final class Collection extends H2Collection {
        private final CommittedWrites committed;

        Collection(Database database, String name, CollectionOptions options, MVMap<Object, Document> data,
                   MVMap<String, Object> meta, CursorRegistry cursors, Supplier<ChangeStreamOplog> oplog) {
            super(database, name, options, data, meta, cursors);
            committed = new CommittedWrites(this, oplog);
        }

        @Override
        public synchronized void addDocument(Document document) {
            super.addDocument(document);
            committed.inserted(document);
        }

        @Override
        protected void removeDocument(Object position) {
            Document document = getDocument(position);
            super.removeDocument(position);
            committed.deleted(document);
        }

        @Override
        protected void handleUpdate(Object position, Document oldDocument, Document newDocument) {
            super.handleUpdate(position, oldDocument, newDocument);
            committed.updated(newDocument);
        }

        @Override
        public synchronized Document updateDocuments(Document selector, Document updateQuery, ArrayFilters arrayFilters,
                                                     boolean isMulti, boolean isUpsert, Oplog oplog) {
            return committed.applying(updateQuery,
                () -> super.updateDocuments(selector, updateQuery, arrayFilters, isMulti, isUpsert, oplog));
        }

        @Override
        public synchronized Document findAndModify(Document query) {
            Object update = query.get("update");
            return committed.applying(update instanceof Document ? (Document) update : null,
                () -> super.findAndModify(query));
        }
    }
}
