package cronswap.testmongo;

import java.time.Clock;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReadWriteLock;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.stream.Collectors;

import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.MongoVersion;
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
 * <li>{@code findAndModify} (findOneAndUpdate/Replace/Delete) writes oplog entries, so it shows up in change streams;</li>
 * <li>writes are serialised, so oplog order is apply order, and durable before they are acknowledged (H2);</li>
 * <li>{@code hello} is answered like {@code isMaster}.</li>
 * </ul>
 */
final class CompatBackend implements MongoBackend {

    /** Implemented by the backend subclasses so the wrapper can reach the oplog and cursors. */
    interface Internals {
        ChangeStreamOplog changeStreamOplog();

        CursorRegistry cursors();

        /** Makes acknowledged writes durable (H2: commit the MVStore), so a killed server keeps them. */
        default void afterWrite() {
        }
    }

    private static final long DEFAULT_AWAIT_MILLIS = 1000;

    private static final Set<String> WRITE_COMMANDS = Set.of("insert", "update", "delete", "findandmodify", "drop",
        "dropdatabase", "create", "createindexes", "dropindexes", "renamecollection", "collmod");

    private final MongoBackend delegate;
    private final Internals internals;
    private final ReadWriteLock lock = new ReentrantReadWriteLock();

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
            case "aggregate":
                if (isChangeStream(query)) {
                    return changeStreamAggregate(channel, databaseName, command, query);
                }
                return delegate.handleCommand(channel, databaseName, command, query);
            case "findandmodify":
                return write(() -> findAndModify(channel, databaseName, command, query));
            default:
                if (WRITE_COMMANDS.contains(name)) {
                    return write(() -> delegate.handleCommand(channel, databaseName, command, query));
                }
                return delegate.handleCommand(channel, databaseName, command, query);
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

    private Document write(Call call) {
        lock.writeLock().lock();
        try {
            Document result = call.run();
            internals.afterWrite();
            return result;
        } catch (RuntimeException e) {
            internals.afterWrite(); // an ordered bulk write may have applied part of its documents
            throw e;
        } finally {
            lock.writeLock().unlock();
        }
    }

    private Document read(Call call) {
        lock.readLock().lock();
        try {
            return call.run();
        } finally {
            lock.readLock().unlock();
        }
    }

    private static boolean isChangeStream(Document query) {
        Object pipeline = query.get("pipeline");
        if (!(pipeline instanceof List) || ((List<?>) pipeline).isEmpty()) {
            return false;
        }
        Object first = ((List<?>) pipeline).get(0);
        return first instanceof Document && ((Document) first).containsKey("$changeStream");
    }

    private Document changeStreamAggregate(Channel channel, String databaseName, String command, Document query) {
        Document response = read(() -> delegate.handleCommand(channel, databaseName, command, query));
        Object cursorObject = response.get("cursor");
        if (cursorObject instanceof Document) {
            long id = ((Number) ((Document) cursorObject).get("id")).longValue();
            ChangeStreamOplog.cursor(internals.cursors(), id).ifPresent(c -> addPostBatchResumeToken(response, c));
        }
        return response;
    }

    private Document getMore(Channel channel, String databaseName, String command, Document query) {
        long cursorId = ((Number) query.get(command)).longValue();
        Optional<ChangeStreamOplog.ChangeStreamCursor> cursor =
            ChangeStreamOplog.cursor(internals.cursors(), cursorId);
        if (cursor.isEmpty()) {
            return delegate.handleCommand(channel, databaseName, command, query);
        }
        ChangeStreamOplog.ChangeStreamCursor changeStream = cursor.get();
        ChangeStreamOplog oplog = internals.changeStreamOplog();
        Object maxTime = query.get("maxTimeMS");
        long awaitMillis = maxTime instanceof Number ? ((Number) maxTime).longValue() : DEFAULT_AWAIT_MILLIS;
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(awaitMillis);
        while (true) {
            long seen = oplog.sequence();
            Document response = read(() -> delegate.handleCommand(channel, databaseName, command, query));
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

    /** Adds the cursor's high-water mark, also to the last reply of a cursor that ended (invalidate). */
    private static void addPostBatchResumeToken(Document response, ChangeStreamOplog.ChangeStreamCursor cursor) {
        Object cursorObject = response.get("cursor");
        if (cursorObject instanceof Document) {
            ((Document) cursorObject).put("postBatchResumeToken", cursor.postBatchResumeToken());
        }
    }

    /**
     * The library's findAndModify bypasses the oplog; find the target first, run it, then record what happened.
     */
    private Document findAndModify(Channel channel, String databaseName, String command, Document query) {
        String collectionName = String.valueOf(query.get(command));
        String namespace = databaseName + "." + collectionName;
        Document filter = query.get("query") instanceof Document ? (Document) query.get("query") : new Document();
        Document before = findFirst(databaseName, collectionName, filter, query.get("sort"));
        Document beforeCopy = before == null ? null : before.cloneDeeply();
        boolean upsert = Boolean.TRUE.equals(query.get("upsert"));
        Set<Object> idsBefore = before == null && upsert ? ids(databaseName, collectionName) : Set.of();

        Document response = delegate.handleCommand(channel, databaseName, command, query);

        ChangeStreamOplog oplog = internals.changeStreamOplog();
        boolean remove = Boolean.TRUE.equals(query.get("remove"))
            || (query.get("remove") instanceof Number && ((Number) query.get("remove")).intValue() != 0);
        if (remove) {
            if (beforeCopy != null) {
                oplog.handleDelete(namespace, filter, List.of(beforeCopy.get("_id")));
            }
        } else if (query.get("update") instanceof Document) {
            Document update = (Document) query.get("update");
            if (beforeCopy != null) {
                Object id = beforeCopy.get("_id");
                Document after = oplog.lookup(namespace, id);
                if (after != null && !after.equals(beforeCopy)) {
                    oplog.handleUpdate(namespace, filter, update, List.of(id));
                }
            } else if (upsert) {
                // the upserted document need not match the filter: find the one that is new
                MongoCollection<?> collection = delegate.resolveDatabase(databaseName).resolveCollection(collectionName, false);
                if (collection != null) {
                    List<Document> inserted = collection.queryAllAsStream()
                        .filter(document -> !idsBefore.contains(document.get("_id")))
                        .map(Document::cloneDeeply)
                        .collect(Collectors.toList());
                    if (!inserted.isEmpty()) {
                        oplog.handleInsert(namespace, inserted);
                    }
                }
            }
        }
        return response;
    }

    private Set<Object> ids(String databaseName, String collectionName) {
        MongoCollection<?> collection = delegate.resolveDatabase(databaseName).resolveCollection(collectionName, false);
        if (collection == null) {
            return Set.of();
        }
        return collection.queryAllAsStream().map(document -> document.get("_id")).collect(Collectors.toSet());
    }

    private Document findFirst(String databaseName, String collectionName, Document filter, Object sort) {
        MongoDatabase database = delegate.resolveDatabase(databaseName);
        MongoCollection<?> collection = database.resolveCollection(collectionName, false);
        if (collection == null) {
            return null;
        }
        Document queryObject = new Document("query", filter);
        if (sort != null) {
            queryObject.put("orderby", sort);
        }
        for (Document document : collection.handleQuery(queryObject, 0, 1)) {
            return document;
        }
        return null;
    }

    // ---------------------------------------------------------------- plain delegation

    @Override
    public void handleClose(Channel channel) {
        delegate.handleClose(channel);
    }

    @Override
    public QueryResult handleQuery(MongoQuery query) {
        return delegate.handleQuery(query);
    }

    @Override
    public void dropDatabase(String database) {
        write(() -> {
            delegate.dropDatabase(database);
            return null;
        });
    }

    @Override
    public Collection<Document> getCurrentOperations(MongoQuery query) {
        return delegate.getCurrentOperations(query);
    }

    @Override
    public Document getServerStatus() {
        return delegate.getServerStatus();
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
