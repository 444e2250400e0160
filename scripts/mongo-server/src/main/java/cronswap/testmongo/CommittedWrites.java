package cronswap.testmongo;

import java.util.function.Supplier;

import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.bson.Document;

/**
 * Reports each write a collection has applied to the {@link ChangeStreamOplog}, at the moment it is applied, so that
 * change streams see exactly the committed writes, as on a real server.
 *
 * <p>The library tells its oplog what a command attempted, not what it did: an insert command reports every document
 * it was given, also those refused (a duplicate key) or never tried (after the first error of an ordered insert), and
 * a multi-update that fails part-way reports nothing of the documents it had already changed. The collections
 * ({@link IndexedMemory.IndexedCollection}, {@link H2Storage.Collection}) therefore call this helper from the points
 * where a document is actually added, changed or removed, and the oplog ignores the library's own reports.
 *
 * <p>Writes to the {@code local} database (the oplog itself) and to {@code system.*} collections (the library's
 * index and namespace catalogues) are not reported, as a real server's change streams do not show them.
 */
final class CommittedWrites {
    private final MongoCollection<?> collection;
    private final Supplier<ChangeStreamOplog> oplog;
    /** The update (operators or a replacement) that updateDocuments or findAndModify is applying, or null. */
    private Document update;

    /**
     * @param collection the collection whose writes are reported (its name is read at each write: it may be renamed)
     * @param oplog      the backend's oplog; null while the backend is being built (nothing is reported then)
     */
    CommittedWrites(MongoCollection<?> collection, Supplier<ChangeStreamOplog> oplog) {
        this.collection = collection;
        this.oplog = oplog;
    }

    /** Runs write with update as the update that {@link #updated} reports; call it with the collection's lock held. */
    <T> T applying(Document update, Supplier<T> write) {
        Document outer = this.update;
        this.update = update;
        try {
            return write.get();
        } finally {
            this.update = outer;
        }
    }

    /** A document was added (an insert or an upsert). */
    void inserted(Document document) {
        ChangeStreamOplog target = target();
        if (target != null) {
            target.recordInsert(collection.getFullName(), document);
        }
    }

    /** A document was changed in place; postImage is the document as it is now. */
    void updated(Document postImage) {
        ChangeStreamOplog target = target();
        if (target != null) {
            target.recordUpdate(collection.getFullName(), update, postImage);
        }
    }

    /** A document was removed. */
    void deleted(Document document) {
        ChangeStreamOplog target = target();
        if (target != null && document != null) {
            target.recordDelete(collection.getFullName(), document.get("_id"));
        }
    }

    private ChangeStreamOplog target() {
        if (collection.getDatabaseName().equals("local") || collection.getCollectionName().startsWith("system.")) {
            return null;
        }
        return oplog.get();
    }
}
