package cronswap.testmongo;

import java.security.SecureRandom;
import java.time.Clock;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.backend.AbstractCursor;
import de.bwaldvogel.mongo.backend.Cursor;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.Missing;
import de.bwaldvogel.mongo.backend.Utils;
import de.bwaldvogel.mongo.backend.aggregation.Aggregation;
import de.bwaldvogel.mongo.bson.BsonTimestamp;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.exception.MongoServerError;
import de.bwaldvogel.mongo.oplog.Oplog;

/**
 * An oplog (collection {@code local.oplog.rs}) and change-stream implementation that produces events shaped like
 * MongoDB 6.0's, replacing the library's {@code CollectionBackedOplog}:
 *
 * <ul>
 * <li>an entry for each write the server applied, and for nothing it refused: the collections report their writes
 * as they apply them ({@link CommittedWrites}); the library's own reports of what a command attempted are ignored;</li>
 * <li>events carry {@code _id} (resume token), {@code operationType} (insert, update, replace, delete, drop,
 * invalidate), {@code clusterTime}, {@code wallTime}, {@code ns}, {@code documentKey: {_id}}, and, for updates,
 * {@code updateDescription};</li>
 * <li>{@code fullDocument} follows the server's rules: always for insert and replace; for update only with
 * {@code updateLookup} (current document, {@code null} when it is gone) or {@code whenAvailable}/{@code required}
 * (post-image recorded at write time); never for delete;</li>
 * <li>resume tokens are validated like a real server does: wrong type (40647), not hex (9 FailedToParse),
 * older than the oplog (286 ChangeStreamHistoryLost), an event token that is not in the oplog
 * (280 ChangeStreamFatalError), {@code resumeAfter} an invalidate (260 InvalidResumeToken);</li>
 * <li>cursors remember a high-water mark, exposed as {@code postBatchResumeToken} by {@link CompatBackend};</li>
 * <li>timestamps are (seconds, counter), strictly increasing, also across restarts with a persistent backend.</li>
 * </ul>
 *
 * Resume tokens look like {@code {_data: "<16 hex ts><8 hex oplog id><2 hex type><2 hex invalidate>"}}; they are
 * opaque to clients. The oplog id is random per oplog (kept in the H2 file with the data), so a token from an earlier
 * in-memory server run is "history lost" (286), like a token that fell off a real oplog. With a bound on its entries
 * the oplog drops its oldest ones as a real server's capped oplog does, in memory and in the H2 file alike.
 */
final class ChangeStreamOplog implements Oplog {

    static final String OPLOG_NAMESPACE = "local.oplog.rs";

    private static final Pattern HEX = Pattern.compile("[0-9a-fA-F]*");
    private static final int TOKEN_EVENT = 0;
    private static final int TOKEN_HIGH_WATER_MARK = 1;

    private final MongoBackend backend;
    private final MongoCollection<Document> collection;
    private final CursorRegistry cursorRegistry;
    private final Clock clock;
    private final SecureRandom random = new SecureRandom();

    /** The collection, in the {@code local} database, that keeps a persisted oplog's id ({@link #META_ID}). */
    static final String META_COLLECTION = "oplog.meta";
    private static final String META_ID = "oplog";

    private final Object lock = new Object();
    /**
     * The most entries kept; 0: unbounded. Past it the oldest tenth is dropped (also from {@link #collection} when
     * persisted), as a real server's capped oplog drops its oldest entries, and a stream or a resume token from
     * before the oldest entry left gets 286 (ChangeStreamHistoryLost).
     */
    private final int maxEntries;
    /**
     * Whether entries are also written to {@link #collection}: with a file backend, so that they survive a restart;
     * in memory they would only be a second copy of {@link #entries}, indexed on every write.
     */
    private final boolean persist;
    /**
     * Every entry of {@link #collection}, in timestamp order: a getMore reads from its position on by a binary
     * search instead of scanning and sorting the whole collection (which never shrinks) on every wake-up.
     */
    private final ArrayList<Document> entries = new ArrayList<>();
    /** Timestamp (BSON value) of the newest entry; every entry up to it is in {@link #collection}. */
    private long lastTs;
    /** Timestamp of the oldest entry: tokens before it are "history lost"; guarded by {@link #lock}. */
    private long firstTs;
    /** Identifies this oplog's history; part of every token. */
    private final int oplogId;
    /** Bumped on every append; awaited by tailing getMores. */
    private long sequence;
    private boolean closed;

    /**
     * Opens the oplog of backend in {@code local.oplog.rs}: with persist, the entries a file backend kept there are
     * read back (and the collection is written from then on); maxEntries bounds it (0: unbounded).
     */
    static ChangeStreamOplog open(MongoBackend backend, CursorRegistry cursorRegistry, boolean persist,
                                  int maxEntries) {
        MongoDatabase local = backend.resolveDatabase("local");
        return new ChangeStreamOplog(backend, resolveOrCreate(local, "oplog.rs"),
            persist ? resolveOrCreate(local, META_COLLECTION) : null, cursorRegistry, persist, maxEntries);
    }

    @SuppressWarnings("unchecked")
    private static MongoCollection<Document> resolveOrCreate(MongoDatabase database, String name) {
        MongoCollection<?> collection = database.resolveCollection(name, false);
        if (collection == null) {
            collection = database.createCollectionOrThrowIfExists(name);
        }
        return (MongoCollection<Document>) collection;
    }

    private ChangeStreamOplog(MongoBackend backend, MongoCollection<Document> collection,
                              MongoCollection<Document> meta, CursorRegistry cursorRegistry, boolean persist,
                              int maxEntries) {
        this.backend = backend;
        this.persist = persist;
        this.collection = collection;
        this.cursorRegistry = cursorRegistry;
        this.clock = backend.getClock();
        this.maxEntries = Math.max(0, maxEntries);
        List<Document> existing = new ArrayList<>();
        collection.queryAll().forEach(existing::add);
        existing.sort((a, b) -> Long.compareUnsigned(ts(a), ts(b)));
        synchronized (lock) {
            entries.addAll(existing);
            if (existing.isEmpty()) {
                oplogId = random.nextInt();
                lastTs = clock.instant().getEpochSecond() << 32;
                append(new Document("op", "n").append("ns", "")
                    .append("o", new Document("msg", "initiating set").append("oplogId", oplogId)));
                firstTs = lastTs;
            } else {
                oplogId = storedOplogId(meta, existing.get(0));
                lastTs = ts(existing.get(existing.size() - 1));
                truncate();
                firstTs = ts(entries.get(0));
            }
        }
        if (meta != null && !meta.handleQueryAsStream(new Document("_id", META_ID)).findAny().isPresent()) {
            meta.addDocument(new Document("_id", META_ID).append("oplogId", oplogId));
        }
    }

    /**
     * The id of a persisted oplog: kept in {@link #META_COLLECTION}, since a bounded oplog drops its first entry;
     * a file written before that collection existed has it in its first entry ("initiating set").
     */
    private int storedOplogId(MongoCollection<Document> meta, Document first) {
        Object id = null;
        if (meta != null) {
            id = meta.handleQueryAsStream(new Document("_id", META_ID)).findFirst()
                .map(document -> document.get("oplogId")).orElse(null);
        }
        if (id == null && first.get("o") instanceof Document) {
            id = ((Document) first.get("o")).get("oplogId");
        }
        return id instanceof Number ? ((Number) id).intValue() : random.nextInt();
    }

    // ---------------------------------------------------------------- writing

    private long nextTs() {
        long now = clock.instant().getEpochSecond();
        long lastSeconds = lastTs >>> 32;
        long lastInc = lastTs & 0xffffffffL;
        if (now > lastSeconds) {
            return now << 32 | 1;
        }
        return lastSeconds << 32 | (lastInc + 1);
    }

    private void append(Document fields) {
        synchronized (lock) {
            long ts = nextTs();
            Document entry = new Document("ts", new BsonTimestamp(ts))
                .append("t", 1L)
                .append("v", 2L)
                .append("wall", clock.instant());
            entry.putAll(fields);
            if (persist) {
                collection.addDocument(entry);
            }
            entries.add(entry);
            lastTs = ts;
            if (truncate()) {
                firstTs = ts(entries.get(0));
            }
            sequence++;
            lock.notifyAll();
        }
    }

    /**
     * Past {@link #maxEntries}, drops the oldest entries down to nine tenths of it (from the collection too when
     * persisted); call with {@link #lock} held. Whether it dropped any.
     */
    private boolean truncate() {
        if (maxEntries == 0 || entries.size() <= maxEntries) {
            return false;
        }
        List<Document> dropped = entries.subList(0, entries.size() - maxEntries + maxEntries / 10);
        if (persist) {
            dropped.forEach(collection::removeDocument);
        }
        dropped.clear();
        return true;
    }

    /** An insert (or upsert) the server applied: document as it was added. */
    void recordInsert(String namespace, Document document) {
        append(new Document("op", "i")
            .append("ns", namespace)
            .append("o", document.cloneDeeply())
            .append("o2", new Document("_id", document.get("_id"))));
    }

    /**
     * An update the server applied to one document: update is the update operators or replacement it was given (null
     * if unknown: then a replacement by the post-image), postImage the document as it is now.
     */
    void recordUpdate(String namespace, Document update, Document postImage) {
        Document copy = postImage.cloneDeeply();
        append(new Document("op", "u")
            .append("ns", namespace)
            .append("o", update != null ? update.cloneDeeply() : copy)
            .append("o2", new Document("_id", postImage.get("_id")))
            .append("postImage", copy));
    }

    /** A delete the server applied. */
    void recordDelete(String namespace, Object id) {
        append(new Document("op", "d").append("ns", namespace).append("o", new Document("_id", id)));
    }

    /**
     * {@code {cronswapOplogStats: 1}}: the number of entries kept in memory and, when persisted, in
     * {@code local.oplog.rs}; the bound (0: none); the oldest and newest timestamps.
     */
    Document stats() {
        synchronized (lock) {
            Document stats = new Document("entries", entries.size()).append("maxEntries", maxEntries)
                .append("firstTs", new BsonTimestamp(firstTs)).append("lastTs", new BsonTimestamp(lastTs));
            if (persist) {
                stats.append("persisted", collection.count());
            }
            return stats;
        }
    }

    // The library reports what a write command attempted (every document of an insert, also the refused ones; none
    // of a multi-update that failed part-way): events come from CommittedWrites instead, as each write is applied.

    @Override
    public void handleInsert(String namespace, List<Document> documents) {
    }

    @Override
    public void handleUpdate(String namespace, Document selector, Document update, List<Object> modifiedIds) {
    }

    @Override
    public void handleDelete(String namespace, Document query, List<Object> deletedIds) {
    }

    @Override
    public void handleDropCollection(String namespace) {
        if (isOplog(namespace)) {
            return;
        }
        append(new Document("op", "c")
            .append("ns", Utils.getDatabaseNameFromFullName(namespace) + ".$cmd")
            .append("o", new Document("drop", Utils.getCollectionNameFromFullName(namespace))));
    }

    private boolean isOplog(String namespace) {
        return namespace.equals(OPLOG_NAMESPACE);
    }

    Document lookup(String namespace, Object id) {
        MongoDatabase database = backend.resolveDatabase(Utils.getDatabaseNameFromFullName(namespace));
        MongoCollection<?> target = database.resolveCollection(Utils.getCollectionNameFromFullName(namespace), false);
        if (target == null) {
            return null;
        }
        return target.handleQueryAsStream(new Document("_id", id)).findFirst().orElse(null);
    }

    // ---------------------------------------------------------------- waiting

    /** The current change counter; pass it to {@link #awaitChange}. */
    long sequence() {
        synchronized (lock) {
            return sequence;
        }
    }

    /** Waits until something is appended after {@code seen}, the deadline passes, or the oplog is closed. */
    void awaitChange(long seen, long deadlineNanos) throws InterruptedException {
        synchronized (lock) {
            while (!closed && sequence == seen) {
                long remaining = deadlineNanos - System.nanoTime();
                if (remaining <= 0) {
                    return;
                }
                lock.wait(Math.max(1, remaining / 1_000_000), 0);
            }
        }
    }

    void close() {
        synchronized (lock) {
            closed = true;
            lock.notifyAll();
        }
    }

    private long highWaterMark() {
        synchronized (lock) {
            return lastTs;
        }
    }

    // ---------------------------------------------------------------- tokens

    /** A position in the change stream: after every event at (ts, sub) or before. */
    record Position(long ts, int sub) implements Comparable<Position> {
        @Override
        public int compareTo(Position o) {
            int c = Long.compareUnsigned(ts, o.ts);
            return c != 0 ? c : Integer.compare(sub, o.sub);
        }

        boolean isAfter(Position o) {
            return compareTo(o) > 0;
        }
    }

    record Token(long ts, int oplogId, int type, boolean fromInvalidate) {
        Position position() {
            if (type == TOKEN_HIGH_WATER_MARK) {
                return new Position(ts, Integer.MAX_VALUE);
            }
            return new Position(ts, fromInvalidate ? 1 : 0);
        }

        Document toDocument() {
            return new Document("_data",
                String.format("%016x%08x%02x%02x", ts, oplogId, type, fromInvalidate ? 1 : 0));
        }
    }

    static Token parseToken(Object value) {
        Object data = value instanceof Document ? ((Document) value).get("_data") : null;
        if (!(data instanceof String)) {
            throw new MongoServerError(40647, "Location40647",
                "Bad resume token: _data of missing or of wrong type. Expected string, got " + value);
        }
        String hex = (String) data;
        if (hex.length() % 2 != 0 || !HEX.matcher(hex).matches()) {
            throw new MongoServerError(9, "FailedToParse", "resume token string was not a valid hex string");
        }
        if (hex.length() != 28) {
            throw new MongoServerError(50811, "Location50811",
                "KeyString format error: resume token " + value + " was not issued by this server");
        }
        long ts = Long.parseUnsignedLong(hex.substring(0, 16), 16);
        int oplogId = Integer.parseUnsignedInt(hex.substring(16, 24), 16);
        int type = Integer.parseInt(hex.substring(24, 26), 16);
        int invalidate = Integer.parseInt(hex.substring(26, 28), 16);
        if ((type != TOKEN_EVENT && type != TOKEN_HIGH_WATER_MARK) || invalidate > 1) {
            throw new MongoServerError(51057, "Location51057", "Token type " + type + " not recognized");
        }
        return new Token(ts, oplogId, type, invalidate == 1);
    }

    private static long ts(Document entry) {
        return ((BsonTimestamp) entry.get("ts")).getValue();
    }

    // ---------------------------------------------------------------- reading

    @Override
    public Cursor createCursor(Document spec, String namespace, Aggregation aggregation) {
        int resumeOptions = 0;
        for (String key : List.of("resumeAfter", "startAfter", "startAtOperationTime")) {
            if (spec.get(key) != null) {
                resumeOptions++;
            }
        }
        if (resumeOptions > 1) {
            throw new MongoServerError(40674, "Location40674",
                "Only one type of resume option is allowed, but multiple were found.");
        }
        Object fullDocument = spec.getOrDefault("fullDocument", "default");
        if (!List.of("default", "updateLookup", "whenAvailable", "required").contains(fullDocument)) {
            throw new MongoServerError(BAD_VALUE, "BadValue",
                "unknown full document mode: " + fullDocument);
        }

        Position start;
        if (spec.get("resumeAfter") != null || spec.get("startAfter") != null) {
            boolean resumeAfter = spec.get("resumeAfter") != null;
            Token token = parseToken(resumeAfter ? spec.get("resumeAfter") : spec.get("startAfter"));
            if (resumeAfter && token.fromInvalidate()) {
                throw new MongoServerError(260, "InvalidResumeToken",
                    "Attempting to resume a change stream using 'resumeAfter' is not allowed from an invalidate "
                        + "notification.");
            }
            if (token.oplogId() != oplogId) {
                throw historyLost();
            }
            checkInHistory(token.ts());
            if (token.type() == TOKEN_EVENT && !containsTs(token.ts())) {
                throw new MongoServerError(280, "ChangeStreamFatalError",
                    "cannot resume stream; the resume token was not found. " + token.toDocument());
            }
            start = token.position();
        } else if (spec.get("startAtOperationTime") != null) {
            Object value = spec.get("startAtOperationTime");
            if (!(value instanceof BsonTimestamp)) {
                throw new MongoServerError(14, "TypeMismatch",
                    "BSON field '$changeStream.startAtOperationTime' is the wrong type, expected type 'timestamp'");
            }
            long ts = ((BsonTimestamp) value).getValue();
            checkInHistory(ts);
            // inclusive: everything at ts or later
            start = ts == 0 ? new Position(0, -1) : new Position(ts - 1, Integer.MAX_VALUE);
        } else {
            start = new Position(highWaterMark(), Integer.MAX_VALUE);
        }

        String database = Utils.getDatabaseNameFromFullName(namespace);
        String collectionName = Utils.getCollectionNameFromFullName(namespace);
        // aggregate: 1 (database-wide stream) arrives here as collection "1"
        String watched = collectionName.equals("1") ? null : collectionName;
        long id;
        do {
            id = random.nextLong() & Long.MAX_VALUE;
        } while (id == 0);
        ChangeStreamCursor cursor = new ChangeStreamCursor(id, database, watched, (String) fullDocument, aggregation, start);
        cursorRegistry.add(cursor);
        return cursor;
    }

    private static final int BAD_VALUE = 2;

    private void checkInHistory(long ts) {
        synchronized (lock) {
            if (Long.compareUnsigned(ts, firstTs) < 0) {
                throw historyLost();
            }
        }
    }

    private static MongoServerError historyLost() {
        return new MongoServerError(286, "ChangeStreamHistoryLost",
            "Resume of change stream was not possible, as the resume point may no longer be in the oplog.");
    }

    private boolean containsTs(long ts) {
        synchronized (lock) {
            int i = firstAtOrAfter(ts);
            return i < entries.size() && ts(entries.get(i)) == ts;
        }
    }

    /** The index of the first entry at or after ts (entries.size() if none); call with {@link #lock} held. */
    private int firstAtOrAfter(long ts) {
        int lo = 0;
        int hi = entries.size();
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            if (Long.compareUnsigned(ts(entries.get(mid)), ts) < 0) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        return lo;
    }

    /** The entries at or after ts, in order. */
    private List<Document> entriesFrom(long ts) {
        synchronized (lock) {
            return new ArrayList<>(entries.subList(firstAtOrAfter(ts), entries.size()));
        }
    }

    /** One event generated from an oplog entry, with its position. */
    private record Event(Position position, Document document) {
    }

    private Stream<Event> events(Document entry, ChangeStreamCursor cursor) {
        String op = (String) entry.get("op");
        String ns = (String) entry.get("ns");
        long ts = ts(entry);
        BsonTimestamp clusterTime = new BsonTimestamp(ts);
        Object wall = entry.get("wall");
        Document o = (Document) entry.get("o");
        switch (op) {
            case "i":
            case "u":
            case "d": {
                String db = Utils.getDatabaseNameFromFullName(ns);
                String coll = Utils.getCollectionNameFromFullName(ns);
                if (!cursor.matches(db, coll)) {
                    return Stream.empty();
                }
                Document event = header(ts, false, op, o, clusterTime, wall);
                Document nsDoc = new Document("db", db).append("coll", coll);
                if (op.equals("i")) {
                    event.put("fullDocument", o.cloneDeeply());
                    event.put("ns", nsDoc);
                    event.put("documentKey", new Document("_id", o.get("_id")));
                } else if (op.equals("d")) {
                    event.put("ns", nsDoc);
                    event.put("documentKey", new Document("_id", o.get("_id")));
                } else {
                    Object id = ((Document) entry.get("o2")).get("_id");
                    Document postImage = (Document) entry.get("postImage");
                    if (isReplacement(o)) {
                        Document full = postImage != null ? postImage.cloneDeeply() : replacement(id, o);
                        event.put("fullDocument", full);
                        event.put("ns", nsDoc);
                        event.put("documentKey", new Document("_id", id));
                    } else {
                        switch (cursor.fullDocument) {
                            case "updateLookup": {
                                Document current = lookup(ns, id);
                                event.put("fullDocument", current == null ? null : current.cloneDeeply());
                                break;
                            }
                            case "whenAvailable":
                                event.put("fullDocument", postImage == null ? null : postImage.cloneDeeply());
                                break;
                            case "required":
                                if (postImage == null) {
                                    throw new MongoServerError(NO_MATCHING_DOCUMENT, "NoMatchingDocument",
                                        "Change stream was configured to require a post-image for all update, "
                                            + "delete and replace events, but no post-image was found");
                                }
                                event.put("fullDocument", postImage.cloneDeeply());
                                break;
                            default:
                                break;
                        }
                        event.put("ns", nsDoc);
                        event.put("documentKey", new Document("_id", id));
                        event.put("updateDescription", updateDescription(o, postImage));
                    }
                }
                return Stream.of(new Event(new Position(ts, 0), event));
            }
            case "c": {
                String db = Utils.getDatabaseNameFromFullName(ns);
                Object dropped = o.get("drop");
                if (!(dropped instanceof String) || !cursor.matches(db, (String) dropped)) {
                    return Stream.empty();
                }
                Document drop = header(ts, false, "drop", o, clusterTime, wall);
                drop.put("ns", new Document("db", db).append("coll", dropped));
                Event dropEvent = new Event(new Position(ts, 0), drop);
                if (cursor.collection == null) {
                    return Stream.of(dropEvent);
                }
                Document invalidate = header(ts, true, "invalidate", o, clusterTime, wall);
                return Stream.of(dropEvent, new Event(new Position(ts, 1), invalidate));
            }
            default:
                return Stream.empty();
        }
    }

    private static final int NO_MATCHING_DOCUMENT = 47;

    private Document header(long ts, boolean fromInvalidate, String op, Document o, BsonTimestamp clusterTime,
                                   Object wall) {
        String operationType;
        switch (op) {
            case "i":
                operationType = "insert";
                break;
            case "d":
                operationType = "delete";
                break;
            case "u":
                operationType = isReplacement(o) ? "replace" : "update";
                break;
            default:
                operationType = op;
        }
        Document event = new Document("_id", new Token(ts, oplogId, TOKEN_EVENT, fromInvalidate).toDocument())
            .append("operationType", operationType)
            .append("clusterTime", clusterTime);
        if (wall instanceof Instant) {
            event.append("wallTime", wall);
        }
        return event;
    }

    private static boolean isReplacement(Document update) {
        return update.keySet().stream().noneMatch(key -> key.startsWith("$"));
    }

    private static Document replacement(Object id, Document o) {
        Document full = new Document("_id", id);
        o.forEach((key, value) -> {
            if (!key.equals("_id")) {
                full.put(key, value);
            }
        });
        return full.cloneDeeply();
    }

    /**
     * Approximates the server's updateDescription: updatedFields holds every path named by an update operator with
     * its value in the post-image taken at write time; removedFields holds $unset paths (and $rename sources).
     */
    private static Document updateDescription(Document update, Document postImage) {
        Document updated = new Document();
        List<String> removed = new ArrayList<>();
        for (Map.Entry<String, Object> operator : update.entrySet()) {
            if (!(operator.getValue() instanceof Document)) {
                continue;
            }
            Document fields = (Document) operator.getValue();
            switch (operator.getKey()) {
                case "$unset":
                    removed.addAll(fields.keySet());
                    break;
                case "$setOnInsert":
                    break;
                case "$rename":
                    for (Map.Entry<String, Object> rename : fields.entrySet()) {
                        removed.add(rename.getKey());
                        putPath(updated, String.valueOf(rename.getValue()), postImage);
                    }
                    break;
                default:
                    for (String path : fields.keySet()) {
                        putPath(updated, path, postImage);
                    }
            }
        }
        return new Document("updatedFields", updated)
            .append("removedFields", removed)
            .append("truncatedArrays", List.of());
    }

    private static void putPath(Document updated, String path, Document postImage) {
        if (postImage == null || path.contains("$")) {
            return;
        }
        Object value;
        try {
            value = Utils.getSubdocumentValue(postImage, path);
        } catch (RuntimeException e) {
            return;
        }
        if (!(value instanceof Missing)) {
            updated.put(path, value instanceof Document ? ((Document) value).cloneDeeply() : value);
        }
    }

    /** A tailable change-stream cursor. */
    final class ChangeStreamCursor extends AbstractCursor {
        private final String database;
        /** null: every collection of {@link #database} */
        private final String collection;
        private final String fullDocument;
        private final Aggregation aggregation;
        private Position position;
        private Document postBatchResumeToken;
        private boolean exhausted;

        ChangeStreamCursor(long id, String database, String collection, String fullDocument, Aggregation aggregation,
                           Position start) {
            super(id);
            this.database = database;
            this.collection = collection;
            this.fullDocument = fullDocument;
            this.aggregation = aggregation;
            this.position = start;
            this.postBatchResumeToken = highWaterMarkToken(start);
        }

        boolean matches(String db, String coll) {
            if (!db.equals(database)) {
                return false;
            }
            if (collection == null) {
                return !coll.startsWith("system.");
            }
            return coll.equals(collection);
        }

        @Override
        public synchronized boolean isEmpty() {
            return exhausted;
        }

        synchronized Document postBatchResumeToken() {
            return postBatchResumeToken;
        }

        @Override
        public synchronized List<Document> takeDocuments(int numberToReturn) {
            if (exhausted) {
                return List.of();
            }
            long highWaterMark = highWaterMark();
            long from = position.ts();
            // A stream whose position fell off a bounded oplog cannot go on.
            checkInHistory(from);
            Stream<Document> stream = aggregation.runStagesAsStream(entriesFrom(from).stream()
                .flatMap(entry -> events(entry, this))
                .filter(event -> event.position().isAfter(position))
                .map(Event::document));
            // as a server: numberToReturn events when given, and at most 16 MiB of them in one reply
            ServerBatches.Budget budget =
                new ServerBatches.Budget(numberToReturn > 0 ? numberToReturn : Integer.MAX_VALUE);
            List<Document> documents = stream.takeWhile(budget::admit).collect(Collectors.toList());
            if (documents.isEmpty()) {
                Position mark = new Position(highWaterMark, Integer.MAX_VALUE);
                if (mark.isAfter(position)) {
                    position = mark;
                }
                postBatchResumeToken = highWaterMarkToken(position);
                return documents;
            }
            for (Document document : documents) {
                if ("invalidate".equals(document.get("operationType"))) {
                    exhausted = true;
                }
            }
            Document last = documents.get(documents.size() - 1);
            Token token;
            try {
                token = parseToken(last.get("_id"));
            } catch (MongoServerError e) {
                throw new MongoServerError(280, "ChangeStreamFatalError",
                    "Encountered an event whose _id field, which contains the resume token, was modified by the "
                        + "pipeline. Modifying the _id field of an event makes it impossible to resume the stream "
                        + "from that point.");
            }
            position = token.position();
            postBatchResumeToken = token.toDocument();
            return documents;
        }

        private Document highWaterMarkToken(Position p) {
            if (p.sub() == Integer.MAX_VALUE) {
                return new Token(p.ts(), oplogId, TOKEN_HIGH_WATER_MARK, false).toDocument();
            }
            return new Token(p.ts(), oplogId, TOKEN_EVENT, p.sub() == 1).toDocument();
        }
    }

    static Optional<ChangeStreamCursor> cursor(CursorRegistry registry, long id) {
        try {
            Cursor cursor = registry.getCursor(id);
            return cursor instanceof ChangeStreamCursor ? Optional.of((ChangeStreamCursor) cursor) : Optional.empty();
        } catch (RuntimeException e) {
            return Optional.empty();
        }
    }
}
