package cronswap.testmongo;

import java.util.List;
import java.util.function.LongSupplier;

import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.backend.AbstractCursor;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.exception.MongoServerError;

/**
 * A find read from the collection as its cursor advances, as a server reads one: the first batch is cut after the
 * first {@code batchSize} (101) matching documents, and each getMore reads the next batch from where the last one
 * stopped. The library instead matches and collects the whole result before it answers (a find of 1,000,000
 * schedules kept the client waiting for the whole scan before its first batch, and none of the decoding a client
 * does could overlap it).
 *
 * <p>Only a plain find of an in-memory collection streams: no sort (or {@code $natural: 1}), no skip, no limit, not
 * tailable, and a filter no index offers candidates for (the collection is scanned; an indexed find's result is
 * small). The others are answered as before.
 *
 * <p>The cursor walks the collection's positions in order (a scan's order, the order of the library's result). A
 * document keeps its position while it exists, so one present throughout the read is returned exactly once, with
 * its contents at the time its batch was read; one inserted meanwhile is returned if it took a position ahead of
 * the cursor (a new one, or a hole a delete left ahead), not if it filled a hole behind; as a server without a
 * snapshot read concern. Each step of the walk runs under {@link CompatBackend}'s read lock and copies what it
 * returns, so a returned document is whole; a step examines at most {@link #STEP} positions, so that a filter
 * matching little in a large collection lets writes in between steps.
 */
final class StreamedFind extends AbstractCursor {

    /** Positions one step examines at most, under one hold of the read lock. */
    static final int STEP = 10_000;

    private final IndexedMemory.IndexedCollection collection;
    private final String ns;
    private final Document filter;
    private final Document projection;
    /** The next position to examine. */
    private int next;
    private boolean exhausted;

    private StreamedFind(long id, IndexedMemory.IndexedCollection collection, Document filter,
                         Document projection) {
        super(id);
        this.collection = collection;
        this.ns = collection.getFullName();
        this.filter = filter;
        this.projection = projection;
    }

    /**
     * A streamed find of {@code query} (a find command) in {@code database}, its cursor id taken from {@code ids}, or
     * null when the find is not one that streams (see the class comment); then the library answers it.
     */
    static StreamedFind open(MongoDatabase database, String command, Document query, LongSupplier ids) {
        Object name = query.get(command);
        if (!(name instanceof String)) {
            return null;
        }
        MongoCollection<?> resolved = database.resolveCollection((String) name, false);
        if (!(resolved instanceof IndexedMemory.IndexedCollection) || !naturalOrder(query.get("sort"))
            || !zero(query.get("skip")) || !zero(query.get("limit")) || Boolean.TRUE.equals(query.get("tailable"))) {
            return null;
        }
        Object filter = query.getOrDefault("filter", new Document());
        Object projection = query.get("projection");
        if (!(filter instanceof Document) || (projection != null && !(projection instanceof Document))) {
            return null;
        }
        IndexedMemory.IndexedCollection collection = (IndexedMemory.IndexedCollection) resolved;
        if (!collection.startScan((Document) filter)) {
            return null;
        }
        Document fields = projection == null || ((Document) projection).isEmpty() ? null : (Document) projection;
        return new StreamedFind(ids.getAsLong(), collection, (Document) filter, fields);
    }

    private static boolean naturalOrder(Object sort) {
        if (sort == null) {
            return true;
        }
        if (!(sort instanceof Document)) {
            return false;
        }
        Document order = (Document) sort;
        return order.isEmpty() || (order.size() == 1 && order.get("$natural") instanceof Number
            && ((Number) order.get("$natural")).doubleValue() > 0);
    }

    private static boolean zero(Object value) {
        return value == null || (value instanceof Number && ((Number) value).longValue() == 0);
    }

    /** The namespace the replies name. */
    String ns() {
        return ns;
    }

    /**
     * One step of a batch: adds to {@code batch} copies of the next matching documents while {@code budget} admits
     * them, examining at most {@link #STEP} positions. Returns true when the batch is complete (the budget is full,
     * the next document did not fit, or the collection has no more). The caller holds the read lock.
     *
     * @throws MongoServerError QueryPlanKilled (175) when the collection was dropped since the find began.
     */
    synchronized boolean step(ServerBatches.Budget budget, List<Document> batch) {
        if (collection.isDropped()) {
            throw new MongoServerError(175, "QueryPlanKilled", "collection dropped: " + ns);
        }
        IndexedMemory.IndexedCollection.Scan scan = collection.scan(next, STEP, filter, projection, budget, batch);
        next = scan.next();
        exhausted = scan.exhausted();
        return exhausted || scan.stopped();
    }

    /** Whether the walk reached the collection's end: the cursor has nothing more to return. */
    @Override
    public synchronized boolean isEmpty() {
        return exhausted;
    }

    /** Not used: {@link CompatBackend} reads the batches with {@link #step}, under its lock. */
    @Override
    public List<Document> takeDocuments(int numberToReturn) {
        throw new UnsupportedOperationException("a streamed find is read through CompatBackend");
    }
}
