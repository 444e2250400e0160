package cronswap.testmongo;

import java.time.Clock;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReadWriteLock;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.Supplier;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.Cursor;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.QueryResult;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.wire.message.MongoMessage;
import de.bwaldvogel.mongo.wire.message.MongoQuery;
import io.netty.channel.Channel;

/**
 * Wraps a library backend (memory or H2) whose oplog is a {@link ChangeStreamOplog} and closes the gaps a
 * change-stream client notices:
 *
 * <ul>
 * <li>{@code getMore} on a change stream waits for new events up to {@code maxTimeMS} (default 1 s) like an awaitData
 * cursor, instead of returning an empty batch at once (which makes drivers spin);</li>
 * <li>change-stream replies carry {@code cursor.postBatchResumeToken};</li>
 * <li>writes are serialised, so oplog order is apply order, and durable before they are acknowledged (H2);</li>
 * <li>an insert's {@code n} counts the documents inserted (the library counts those it was given), and an ordered
 * update command stops at its first failed statement, as a server's does (the library goes on);</li>
 * <li>TTL indexes delete expired documents when {@link #expireTtl} runs (the launcher's TTL monitor);</li>
 * <li>{@code hello} is answered like {@code isMaster};</li>
 * <li>cursor replies are cut into batches as a server cuts them: 101 documents in a first batch unless the command
 * names a batchSize, at most 16 MiB of documents in any reply ({@link ServerBatches});</li>
 * <li>a plain find is read as its cursor advances, a batch at a time ({@link StreamedFind}), not matched and
 * collected whole before its first batch;</li>
 * <li>a reply holds copies of the stored documents, taken under the lock that keeps writes out ({@link #detached}).
 * The library answers a query with the stored documents themselves and changes them in place on an update, and
 * netty encodes a reply on its event loop after the handler has returned, outside any lock: a write that added a
 * field while a reply holding that document was being encoded threw ConcurrentModificationException in the encoder,
 * which then closed the connection (the client saw EOF), or in a reader's own thread (an "Unknown error: null"
 * reply), and a reply could carry a document half updated.</li>
 * </ul>
 *
 * The events themselves come from the collections as they apply writes ({@link CommittedWrites}), findAndModify's
 * and the TTL monitor's included.
 */
final class CompatBackend implements MongoBackend {

    /** Implemented by the backend subclasses so the wrapper can reach the oplog and cursors. */
    interface Internals {
        ChangeStreamOplog changeStreamOplog();

        CursorRegistry cursors();

        /** The names of the databases the backend holds. */
        Set<String> databaseNames();

        /** Makes acknowledged writes durable (H2: commit the MVStore), so a killed server keeps them. */
        default void afterWrite() {
        }
    }

    private static final Logger log = LoggerFactory.getLogger(CompatBackend.class);

    private static final long DEFAULT_AWAIT_MILLIS = 1000;

    /** A wait for {@link #lock} this long is logged: a client's deadline may have passed meanwhile. */
    private static final long SLOW_LOCK_NANOS = TimeUnit.SECONDS.toNanos(2);

    private static final Set<String> WRITE_COMMANDS = Set.of("insert", "update", "delete", "findandmodify", "drop",
        "dropdatabase", "create", "createindexes", "dropindexes", "renamecollection", "collmod");

    /** Commands that touch no stored document, answered without {@link #lock}: a heartbeat waits for no write. */
    private static final Set<String> NO_DATA_COMMANDS = Set.of("ismaster", "ping", "buildinfo", "endsessions",
        "killcursors", "whatsmyuri", "getparameter", "getcmdlineopts", "connectionstatus", "hostinfo");

    private final MongoBackend delegate;
    private final Internals internals;
    /**
     * Writes take it alone, reads together. Fair: a command waits behind those that came before it, never for a
     * stream of later ones; with every read taking it, a write left waiting on a loaded machine (its thread woken
     * but not yet running while others took the free lock) could otherwise wait without bound.
     */
    private final ReadWriteLock lock = new ReentrantReadWriteLock(true);
    /** TTL monitor passes run and documents they deleted, for serverStatus's {@code metrics.ttl}. */
    private final AtomicLong ttlPasses = new AtomicLong();
    private final AtomicLong ttlDeleted = new AtomicLong();
    /** Documents the TTL monitor's deletions examined while holding the write lock ({@link #deleteExpired}). */
    private final AtomicLong ttlExaminedLocked = new AtomicLong();

    CompatBackend(MongoBackend delegate) {
        this.delegate = delegate;
        this.internals = (Internals) delegate;
    }

    @Override
    public Document handleMessage(MongoMessage message) {
        Document query = message.getDocument();
        String command = query.keySet().iterator().next();
        return handleCommand(message.getChannel(), message.getDatabaseName(), command, query);
    }

    @Override
    public Document handleCommand(Channel channel, String databaseName, String command, Document query) {
        String name = command.toLowerCase(Locale.ROOT);
        switch (name) {
            case "hello": {
                Document response = delegate.handleCommand(channel, databaseName, "isMaster", query);
                Document hello = new Document("isWritablePrimary", Boolean.TRUE);
                response.forEach((key, value) -> {
                    if (!key.equals("ismaster")) {
                        hello.put(key, value);
                    }
                });
                return hello;
            }
            case "getmore":
                return getMore(channel, databaseName, command, query);
            case "cronswapquerystats":
                return queryStats(databaseName, String.valueOf(query.get(command)));
            case "serverstatus":
                return getServerStatus();
            case "cronswapoplogstats":
                return internals.changeStreamOplog().stats().append("ok", 1.0);
            case "insert":
                return write(command,
                    () -> countInserted(query, delegate.handleCommand(channel, databaseName, command, query)));
            case "update":
                return write(command, () -> update(channel, databaseName, command, query));
            case "find":
                return find(channel, databaseName, command, query);
            case "aggregate":
                if (isChangeStream(query)) {
                    return changeStreamAggregate(channel, databaseName, command, query);
                }
                if (writesOut(query)) {
                    return write(command, () -> aggregate(channel, databaseName, command, query));
                }
                return read(command, () -> aggregate(channel, databaseName, command, query));
            default:
                if (WRITE_COMMANDS.contains(name)) {
                    return write(command, () -> delegate.handleCommand(channel, databaseName, command, query));
                }
                if (NO_DATA_COMMANDS.contains(name)) {
                    return delegate.handleCommand(channel, databaseName, command, query);
                }
                return read(command, () -> delegate.handleCommand(channel, databaseName, command, query));
        }
    }

    /**
     * {@code {cronswapQueryStats: "<collection>"}}: how the collection's queries (finds, and the filters of
     * updates, deletes and findAndModify) were served since it was created: {@code scans} (the whole collection
     * examined), {@code indexed} (only an index's candidates), {@code examined} (documents given to the matcher),
     * {@code built} (positions copied into candidate sets built from several keys, e.g. for {@code $in}).
     * In-memory backend only; elsewhere all three are absent.
     */
    private Document queryStats(String databaseName, String collectionName) {
        MongoCollection<?> collection = delegate.resolveDatabase(databaseName).resolveCollection(collectionName, false);
        Document response = collection instanceof IndexedMemory.IndexedCollection
            ? ((IndexedMemory.IndexedCollection) collection).queryStats()
            : new Document();
        response.put("ok", 1.0);
        return response;
    }

    private interface Call {
        Document run();
    }

    /** Runs a command that writes, alone; its reply is {@link #detached} before another command can write. */
    private Document write(String command, Call call) {
        acquire(lock.writeLock(), command);
        try {
            Document result = detached(call.run());
            internals.afterWrite();
            return result;
        } catch (RuntimeException e) {
            internals.afterWrite(); // an ordered bulk write may have applied part of its documents
            throw e;
        } finally {
            lock.writeLock().unlock();
        }
    }

    /** Runs a command that only reads, while no write runs; its reply is {@link #detached} before one can. */
    private Document read(String command, Call call) {
        acquire(lock.readLock(), command);
        try {
            return detached(call.run());
        } finally {
            lock.readLock().unlock();
        }
    }

    /** Takes the lock for command, and says so at WARN if that took {@link #SLOW_LOCK_NANOS} or more. */
    private void acquire(Lock part, String command) {
        long start = System.nanoTime();
        part.lock();
        long waited = System.nanoTime() - start;
        if (waited >= SLOW_LOCK_NANOS) {
            log.warn("{} on {} waited {} ms for the {} lock", command, Thread.currentThread().getName(),
                TimeUnit.NANOSECONDS.toMillis(waited), part == lock.writeLock() ? "write" : "read");
        }
    }

    /**
     * A reply that shares no document with the store: a deep copy, taken while the caller holds {@link #lock}. The
     * library's replies hold the stored documents themselves (a find's matches, findAndModify's value, a cursor's
     * next batch), which its updates change in place, and netty encodes the reply later on its event loop, with no
     * lock held.
     */
    private static Document detached(Document reply) {
        return reply == null ? null : reply.cloneDeeply();
    }

    /** An aggregate whose last stage writes its result to a collection ($out, $merge). */
    private static boolean writesOut(Document query) {
        Object pipeline = query.get("pipeline");
        if (!(pipeline instanceof List) || ((List<?>) pipeline).isEmpty()) {
            return false;
        }
        Object last = ((List<?>) pipeline).get(((List<?>) pipeline).size() - 1);
        return last instanceof Document && (((Document) last).containsKey("$out")
            || ((Document) last).containsKey("$merge"));
    }

    private static boolean isChangeStream(Document query) {
        Object pipeline = query.get("pipeline");
        if (!(pipeline instanceof List) || ((List<?>) pipeline).isEmpty()) {
            return false;
        }
        Object first = ((List<?>) pipeline).get(0);
        return first instanceof Document && ((Document) first).containsKey("$changeStream");
    }

    /**
     * A find. A plain scan of an in-memory collection is a {@link StreamedFind}: each batch read as the cursor
     * advances. Any other is cut into batches as a server cuts them ({@link ServerBatches}): the library is asked for
     * the whole result (no batchSize, so it keeps no cursor of its own), and the reply is cut to the first batch. The
     * query itself runs under the collection's own monitor, as the library's do, not under {@link #lock}: a slow one
     * (an {@code $in} of a thousand ids is matched against every document) would hold up every write; only the cut,
     * which measures the documents, and the copy of the first batch take the read lock.
     */
    private Document find(Channel channel, String databaseName, String command, Document query) {
        StreamedFind streamed = StreamedFind.open(delegate.resolveDatabase(databaseName), command, query,
            internals.cursors()::generateCursorId);
        if (streamed != null) {
            return streamedFirst(command, streamed, ServerBatches.firstBatchCount(query.get("batchSize")),
                Boolean.TRUE.equals(query.get("singleBatch")));
        }
        Document whole = query.clone();
        Object batchSize = whole.remove("batchSize");
        Document response = delegate.handleCommand(channel, databaseName, command, whole);
        return read(command, () -> ServerBatches.cutFirstBatch(internals.cursors(), response,
            ServerBatches.firstBatchCount(batchSize), Boolean.TRUE.equals(query.get("singleBatch"))));
    }

    /**
     * The first batch of a {@link StreamedFind}; the cursor is registered for the getMores unless it is exhausted or
     * the find asked for a single batch.
     */
    private Document streamedFirst(String command, StreamedFind cursor, int count, boolean singleBatch) {
        List<Document> batch = streamedBatch(command, cursor, count);
        long id = 0;
        if (!singleBatch && !cursor.isEmpty()) {
            internals.cursors().add(cursor);
            id = cursor.getId();
        }
        Document reply = new Document("id", id).append("ns", cursor.ns()).append("firstBatch", batch);
        return new Document("cursor", reply).append("ok", 1.0);
    }

    /** A getMore on a {@link StreamedFind}: its next batch, and cursor id 0 (the cursor removed) at its end. */
    private Document streamedGetMore(String command, StreamedFind cursor, Document query) {
        Object batchSize = query.get("batchSize");
        int count = batchSize instanceof Number && ((Number) batchSize).intValue() > 0
            ? ((Number) batchSize).intValue() : Integer.MAX_VALUE;
        List<Document> batch;
        try {
            batch = streamedBatch(command, cursor, count);
        } catch (RuntimeException e) {
            internals.cursors().remove(cursor);
            throw e;
        }
        long id = cursor.getId();
        if (cursor.isEmpty()) {
            internals.cursors().remove(cursor);
            id = 0;
        }
        Document reply = new Document("id", id).append("ns", cursor.ns()).append("nextBatch", batch);
        return new Document("cursor", reply).append("ok", 1.0);
    }

    /**
     * The next batch of a streamed find, read in steps ({@link StreamedFind#step}), each under the read lock, so that
     * a write waits for one step at most, not for a whole batch; the documents are copies taken in the step.
     */
    private List<Document> streamedBatch(String command, StreamedFind cursor, int count) {
        ServerBatches.Budget budget = new ServerBatches.Budget(count);
        List<Document> batch = new ArrayList<>();
        boolean complete = false;
        while (!complete) {
            acquire(lock.readLock(), command);
            try {
                complete = cursor.step(budget, batch);
            } finally {
                lock.readLock().unlock();
            }
        }
        return batch;
    }

    /** An aggregate (not a change stream): the library's whole result, cut into batches like a find's. */
    private Document aggregate(Channel channel, String databaseName, String command, Document query) {
        Document response = withLeadingMatch(databaseName, query,
            () -> delegate.handleCommand(channel, databaseName, command, query));
        Object cursor = query.get("cursor");
        Object batchSize = cursor instanceof Document ? ((Document) cursor).get("batchSize") : null;
        return ServerBatches.cutFirstBatch(internals.cursors(), response, ServerBatches.firstBatchCount(batchSize),
            false);
    }

    /**
     * Runs aggregate with the aggregate's collection reading only an index's candidates for the pipeline's leading
     * {@code $match}, as a server's does ({@link IndexedMemory.IndexedCollection#withLeadingMatch}); otherwise as is.
     */
    private Document withLeadingMatch(String databaseName, Document query, Supplier<Document> aggregate) {
        Object name = query.get("aggregate");
        Object pipeline = query.get("pipeline");
        if (!(name instanceof String) || !(pipeline instanceof List) || ((List<?>) pipeline).isEmpty()
            || !(((List<?>) pipeline).get(0) instanceof Document)) {
            return aggregate.get();
        }
        Document first = (Document) ((List<?>) pipeline).get(0);
        if (first.size() != 1 || !(first.get("$match") instanceof Document)) {
            return aggregate.get();
        }
        MongoCollection<?> collection = delegate.resolveDatabase(databaseName).resolveCollection((String) name, false);
        if (!(collection instanceof IndexedMemory.IndexedCollection)) {
            return aggregate.get();
        }
        return ((IndexedMemory.IndexedCollection) collection).withLeadingMatch((Document) first.get("$match"), aggregate);
    }

    private Document changeStreamAggregate(Channel channel, String databaseName, String command, Document query) {
        Document first = query;
        Object cursorOption = query.get("cursor");
        if (!(cursorOption instanceof Document) || !((Document) cursorOption).containsKey("batchSize")) {
            // a server's first batch: 101 events unless asked
            first = query.clone();
            Document cursor = cursorOption instanceof Document ? ((Document) cursorOption).clone() : new Document();
            cursor.put("batchSize", ServerBatches.DEFAULT_FIRST_BATCH);
            first.put("cursor", cursor);
        }
        Document aggregate = first;
        Document response = read(command, () -> delegate.handleCommand(channel, databaseName, command, aggregate));
        Object cursorObject = response.get("cursor");
        if (cursorObject instanceof Document) {
            long id = ((Number) ((Document) cursorObject).get("id")).longValue();
            ChangeStreamOplog.cursor(internals.cursors(), id).ifPresent(c -> addPostBatchResumeToken(response, c));
        }
        return response;
    }

    private Document getMore(Channel channel, String databaseName, String command, Document query) {
        long cursorId = ((Number) query.get(command)).longValue();
        Optional<Cursor> own = ownCursor(cursorId);
        if (own.isPresent() && own.get() instanceof StreamedFind) {
            return streamedGetMore(command, (StreamedFind) own.get(), query);
        }
        if (own.isPresent()) {
            ServerBatches.Batched batched = (ServerBatches.Batched) own.get();
            return read(command, () -> ServerBatches.getMore(internals.cursors(), batched, query));
        }
        Optional<ChangeStreamOplog.ChangeStreamCursor> cursor =
            ChangeStreamOplog.cursor(internals.cursors(), cursorId);
        if (cursor.isEmpty()) {
            return read(command, () -> delegate.handleCommand(channel, databaseName, command, query));
        }
        ChangeStreamOplog.ChangeStreamCursor changeStream = cursor.get();
        ChangeStreamOplog oplog = internals.changeStreamOplog();
        Object maxTime = query.get("maxTimeMS");
        long awaitMillis = maxTime instanceof Number ? ((Number) maxTime).longValue() : DEFAULT_AWAIT_MILLIS;
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(awaitMillis);
        while (true) {
            long seen = oplog.sequence();
            Document response = read(command, () -> delegate.handleCommand(channel, databaseName, command, query));
            Document cursorDocument = (Document) response.get("cursor");
            List<?> batch = (List<?>) cursorDocument.get("nextBatch");
            long id = ((Number) cursorDocument.get("id")).longValue();
            if (!batch.isEmpty() || id == 0 || System.nanoTime() >= deadline || !channel.isActive()) {
                addPostBatchResumeToken(response, changeStream);
                return response;
            }
            try {
                oplog.awaitChange(seen, deadline);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                addPostBatchResumeToken(response, changeStream);
                return response;
            }
        }
    }

    /**
     * The find or aggregate cursor {@code id}, if it is one of the launcher's: a {@link ServerBatches.Batched} or a
     * {@link StreamedFind}.
     */
    private Optional<Cursor> ownCursor(long id) {
        try {
            Cursor cursor = internals.cursors().getCursor(id);
            return cursor instanceof ServerBatches.Batched || cursor instanceof StreamedFind ? Optional.of(cursor)
                : Optional.empty();
        } catch (RuntimeException e) {
            return Optional.empty();
        }
    }

    /** Adds the cursor's high-water mark, also to the last reply of a cursor that ended (invalidate). */
    private static void addPostBatchResumeToken(Document response, ChangeStreamOplog.ChangeStreamCursor cursor) {
        Object cursorObject = response.get("cursor");
        if (cursorObject instanceof Document) {
            ((Document) cursorObject).put("postBatchResumeToken", cursor.postBatchResumeToken());
        }
    }

    /** A write command's {@code ordered}: true unless false is given, as on a server. */
    private static boolean ordered(Document query) {
        return !Boolean.FALSE.equals(query.get("ordered"));
    }

    /**
     * Sets an insert reply's {@code n} to the documents inserted: the library counts every document it was given. An
     * ordered insert stops at its first error, an unordered one skips the failed documents.
     */
    private static Document countInserted(Document query, Document response) {
        Object errors = response.get("writeErrors");
        if (!(errors instanceof List) || ((List<?>) errors).isEmpty()) {
            return response;
        }
        List<?> writeErrors = (List<?>) errors;
        int given = ((List<?>) query.get("documents")).size();
        int inserted = given - writeErrors.size();
        if (ordered(query) && writeErrors.get(0) instanceof Document) {
            inserted = ((Number) ((Document) writeErrors.get(0)).get("index")).intValue();
        }
        response.put("n", inserted);
        return response;
    }

    /**
     * An update command. The library applies every statement even after one failed; an ordered command is run one
     * statement at a time here and stops at its first error, as a server's does.
     */
    @SuppressWarnings("unchecked")
    private Document update(Channel channel, String databaseName, String command, Document query) {
        List<Document> updates = (List<Document>) query.get("updates");
        if (!ordered(query) || updates == null || updates.size() < 2) {
            return delegate.handleCommand(channel, databaseName, command, query);
        }
        int n = 0;
        int modified = 0;
        List<Document> upserted = new ArrayList<>();
        List<Document> writeErrors = new ArrayList<>();
        for (int i = 0; i < updates.size() && writeErrors.isEmpty(); i++) {
            Document single = query.clone();
            single.put("updates", List.of(updates.get(i)));
            Document reply = delegate.handleCommand(channel, databaseName, command, single);
            n += ((Number) reply.getOrDefault("n", 0)).intValue();
            modified += ((Number) reply.getOrDefault("nModified", 0)).intValue();
            for (String field : List.of("upserted", "writeErrors")) {
                if (reply.get(field) instanceof List) {
                    for (Object entry : (List<?>) reply.get(field)) {
                        Document indexed = ((Document) entry).clone();
                        indexed.put("index", i);
                        (field.equals("upserted") ? upserted : writeErrors).add(indexed);
                    }
                }
            }
        }
        Document response = new Document("n", n).append("nModified", modified);
        if (!upserted.isEmpty()) {
            response.put("upserted", upserted);
        }
        if (!writeErrors.isEmpty()) {
            response.put("writeErrors", writeErrors);
        }
        response.put("ok", 1.0);
        return response;
    }

    /** Expired documents one hold of the write lock deletes, in a TTL pass over an in-memory collection. */
    static final int TTL_DELETE_BATCH = 1_000;

    /**
     * One pass of a TTL monitor, as a real server's runs every 60 s: in every collection with a TTL index (an index on
     * one field with {@code expireAfterSeconds}), deletes the documents whose field is a date (or an array holding
     * one) more than expireAfterSeconds in the past. The deletes are ordinary ones: change streams see them. Counted
     * in serverStatus's {@code metrics.ttl}; returns the number of documents deleted.
     *
     * <p>Like a server's, a pass does not stop the other clients while it looks for what expired. A server walks the
     * TTL index and yields; here the in-memory collections are scanned in steps of {@link StreamedFind#STEP}
     * positions, each under the read lock, as a streamed find is, and what expired is deleted by {@code _id}, {@link
     * #TTL_DELETE_BATCH} documents under one hold of the write lock, with the expiry checked again. (Holding the write
     * lock for the whole scan stopped every client for two seconds a minute at a million history entries.) A
     * collection of the H2 backend is still expired by one delete under the write lock.
     */
    int expireTtl() {
        List<Document> indexes = new ArrayList<>();
        List<MongoDatabase> databases = new ArrayList<>();
        acquire(lock.readLock(), "ttl pass");
        try {
            for (String databaseName : internals.databaseNames()) {
                MongoDatabase database = delegate.resolveDatabase(databaseName);
                MongoCollection<?> catalogue = database.resolveCollection("system.indexes", false);
                if (catalogue == null) {
                    continue;
                }
                catalogue.handleQueryAsStream(new Document("expireAfterSeconds", new Document("$exists", true)))
                    .forEach(index -> {
                        indexes.add(index);
                        databases.add(database);
                    });
            }
        } finally {
            lock.readLock().unlock();
        }
        int deleted = 0;
        for (int i = 0; i < indexes.size(); i++) {
            deleted += expire(databases.get(i), indexes.get(i));
        }
        ttlDeleted.addAndGet(deleted);
        ttlPasses.incrementAndGet();
        return deleted;
    }

    /** Deletes the documents the TTL index (its description in system.indexes) has expired. */
    private int expire(MongoDatabase database, Document index) {
        Object key = index.get("key");
        Object seconds = index.get("expireAfterSeconds");
        Object namespace = index.get("ns");
        if (!(key instanceof Document) || ((Document) key).size() != 1 || !(seconds instanceof Number)
            || !(namespace instanceof String)) {
            return 0; // a server ignores expireAfterSeconds on a compound index
        }
        String collectionName = ((String) namespace).substring(database.getDatabaseName().length() + 1);
        String field = ((Document) key).keySet().iterator().next();
        Instant cutoff = getClock().instant().minusMillis((long) (((Number) seconds).doubleValue() * 1000));
        Document expired = new Document(field, new Document("$lt", cutoff));
        MongoCollection<?> collection;
        acquire(lock.readLock(), "ttl pass");
        try {
            collection = database.resolveCollection(collectionName, false);
        } finally {
            lock.readLock().unlock();
        }
        if (collection == null) {
            return 0;
        }
        if (!(collection instanceof IndexedMemory.IndexedCollection)) {
            return deleteExpired(collection, expired, null);
        }
        IndexedMemory.IndexedCollection indexed = (IndexedMemory.IndexedCollection) collection;
        Document idOnly = new Document("_id", 1);
        int deleted = 0;
        int next = 0;
        boolean exhausted = false;
        while (!exhausted) {
            // a round: the ids of the expired documents the scan meets, up to a reply's 16 MiB of them
            List<Document> found = new ArrayList<>();
            ServerBatches.Budget budget = new ServerBatches.Budget(Integer.MAX_VALUE);
            boolean full = false;
            while (!exhausted && !full) {
                acquire(lock.readLock(), "ttl pass");
                try {
                    if (indexed.isDropped()) {
                        return deleted;
                    }
                    IndexedMemory.IndexedCollection.Scan scan =
                        indexed.scan(next, StreamedFind.STEP, expired, idOnly, budget, found);
                    next = scan.next();
                    exhausted = scan.exhausted();
                    full = scan.stopped();
                } finally {
                    lock.readLock().unlock();
                }
            }
            for (int from = 0; from < found.size(); from += TTL_DELETE_BATCH) {
                List<Object> ids = new ArrayList<>();
                for (Document document : found.subList(from, Math.min(found.size(), from + TTL_DELETE_BATCH))) {
                    ids.add(document.get("_id"));
                }
                deleted += deleteExpired(collection, expired, ids);
            }
        }
        return deleted;
    }

    /**
     * Deletes from collection, under the write lock, the documents that match expired, among ids when it is not
     * null; the documents the deletion's query examined there count in serverStatus's {@code
     * metrics.ttl.cronswapExaminedLocked} (in-memory collections only).
     */
    private int deleteExpired(MongoCollection<?> collection, Document expired, List<Object> ids) {
        Document filter = ids == null ? expired
            : new Document("$and", List.of(new Document("_id", new Document("$in", ids)), expired));
        acquire(lock.writeLock(), "ttl pass");
        try {
            if (collection instanceof IndexedMemory.IndexedCollection
                && ((IndexedMemory.IndexedCollection) collection).isDropped()) {
                return 0;
            }
            long before = examined(collection);
            int deleted = collection.deleteDocuments(filter, 0);
            ttlExaminedLocked.addAndGet(examined(collection) - before);
            if (deleted > 0) {
                internals.afterWrite();
            }
            return deleted;
        } finally {
            lock.writeLock().unlock();
        }
    }

    /** The documents collection's queries have examined so far (its query counters), 0 outside memory. */
    private static long examined(MongoCollection<?> collection) {
        return collection instanceof IndexedMemory.IndexedCollection
            ? ((IndexedMemory.IndexedCollection) collection).examinedSoFar() : 0;
    }

    // ---------------------------------------------------------------- plain delegation

    @Override
    public void handleClose(Channel channel) {
        delegate.handleClose(channel);
    }

    /** A legacy OP_QUERY: copies of the documents, as {@link #read} gives. */
    @Override
    public QueryResult handleQuery(MongoQuery query) {
        acquire(lock.readLock(), "query");
        try {
            QueryResult result = delegate.handleQuery(query);
            if (result == null) {
                return null;
            }
            List<Document> copies = new ArrayList<>();
            result.forEach(document -> copies.add(document.cloneDeeply()));
            return new QueryResult(copies, result.getCursorId());
        } finally {
            lock.readLock().unlock();
        }
    }

    @Override
    public void dropDatabase(String database) {
        write("dropDatabase", () -> {
            delegate.dropDatabase(database);
            return null;
        });
    }

    @Override
    public Collection<Document> getCurrentOperations(MongoQuery query) {
        return delegate.getCurrentOperations(query);
    }

    /**
     * The library's serverStatus, with {@code metrics.ttl} ({@code passes}, {@code deletedDocuments}) as a server's,
     * and this server's own {@code cronswapExaminedLocked} (see {@link #deleteExpired}).
     */
    @Override
    public Document getServerStatus() {
        Document status = delegate.getServerStatus();
        Object metrics = status.get("metrics");
        if (metrics instanceof Document) {
            ((Document) metrics).put("ttl", new Document("passes", ttlPasses.get())
                .append("deletedDocuments", ttlDeleted.get()).append("cronswapExaminedLocked", ttlExaminedLocked.get()));
        }
        return status;
    }

    @Override
    public void close() {
        ChangeStreamOplog oplog = internals.changeStreamOplog();
        if (oplog != null) {
            oplog.close();
        }
        lock.writeLock().lock();
        try {
            delegate.close();
        } finally {
            lock.writeLock().unlock();
        }
    }

    @Override
    public void closeCursors(List<Long> cursorIds) {
        delegate.closeCursors(cursorIds);
    }

    @Override
    public Clock getClock() {
        return delegate.getClock();
    }

    @Override
    public void enableOplog() {
        delegate.enableOplog();
    }

    @Override
    public void disableOplog() {
        delegate.disableOplog();
    }

    @Override
    public MongoDatabase resolveDatabase(String database) {
        return delegate.resolveDatabase(database);
    }

    @Override
    public MongoBackend version(MongoVersion version) {
        delegate.version(version);
        return this;
    }
}
