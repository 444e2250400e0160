package cronswap.testmongo;

import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;
import java.util.stream.Stream;

import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.backend.ArrayFilters;
import de.bwaldvogel.mongo.backend.CollectionOptions;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.Index;
import de.bwaldvogel.mongo.backend.IndexKey;
import de.bwaldvogel.mongo.backend.KeyValue;
import de.bwaldvogel.mongo.backend.QueryResult;
import de.bwaldvogel.mongo.backend.ValueComparator;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import de.bwaldvogel.mongo.backend.memory.MemoryCollection;
import de.bwaldvogel.mongo.backend.memory.MemoryDatabase;
import de.bwaldvogel.mongo.backend.memory.index.MemoryUniqueIndex;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.bson.ObjectId;
import de.bwaldvogel.mongo.exception.DuplicateKeyError;
import de.bwaldvogel.mongo.oplog.Oplog;
import de.bwaldvogel.mongo.wire.bson.BsonEncoder;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;

/**
 * The in-memory backend with indexes that serve queries the way a server's do. The library alone uses an index
 * only when a filter's keys are exactly the index's keys, and it builds no non-unique index at all, so
 * {@code {_id: X, status: "running"}} (every conditional update of the fire path) and {@code {job_id: J}} (a job's
 * run records) scanned the whole collection, one document at a time.
 *
 * <ul>
 * <li>Non-unique indexes are built ({@link EqualityIndex}); they enforce nothing.</li>
 * <li>Every index, unique or not, answers an equality ({@code v}, {@code {$eq: v}} or {@code {$in: [...]}}) on its
 * first field, whatever else the filter holds; a unique index also answers equalities on all of its fields.</li>
 * <li>A query takes the smallest candidate set any index offers for any top-level condition (also inside
 * {@code $and}; for {@code $or}, the union when every branch has one). The library's matcher still applies the whole
 * filter to each candidate, so what matches is unchanged; candidates are visited in the order a scan visits them
 * (position order, reversed for {@code $natural: -1}), so results come in the same order as without the index.</li>
 * <li>An aggregate whose pipeline begins with a {@code $match} reads only that filter's candidates, the same way
 * ({@link IndexedCollection#withLeadingMatch}); the library reads the whole collection for every aggregate.</li>
 * </ul>
 *
 * Only top-level fields with scalar values (string, number, boolean, date, ObjectId) are indexed and looked up;
 * anything else (dotted paths, ranges, null, regular expressions, subdocuments) is left to the library, as before.
 */
final class IndexedMemory {
    private IndexedMemory() {
    }

    /** The in-memory backend: {@link Database}s and a {@link ChangeStreamOplog} kept in memory only. */
    static final class Backend extends MemoryBackend implements CompatBackend.Internals {
        private final int oplogMaxEntries;

        /** oplogMaxEntries bounds the oplog (0: unbounded). */
        Backend(int oplogMaxEntries) {
            this.oplogMaxEntries = oplogMaxEntries;
        }

        @Override
        public MemoryDatabase openOrCreateDatabase(String databaseName) {
            return new Database(databaseName, getCursorRegistry(), this::changeStreamOplog);
        }

        @Override
        protected Oplog createOplog() {
            return ChangeStreamOplog.open(this, getCursorRegistry(), false, oplogMaxEntries);
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
    }

    /** A filter value no index can look up. */
    private static final Object UNINDEXABLE = new Object();

    /**
     * The lookup key of a scalar, normalised as the library's indexes normalise values (numbers compare by value:
     * 1 and 1.0 are one key), or {@link #UNINDEXABLE}.
     */
    static Object key(Object value) {
        if (value instanceof String || value instanceof Boolean || value instanceof Instant
            || value instanceof java.util.Date || value instanceof ObjectId) {
            return value;
        }
        if (value instanceof Long && (Long) value != (long) ((Long) value).doubleValue()) {
            return value;
        }
        if (value instanceof Integer || value instanceof Long || value instanceof Double || value instanceof Float
            || value instanceof Short || value instanceof Byte) {
            double d = ((Number) value).doubleValue();
            return d == -0.0 ? Double.valueOf(0.0) : Double.valueOf(d);
        }
        return UNINDEXABLE;
    }

    /** The keys a filter value on one field asks for (a value, {$eq}, {$in}), or null if it is not an equality. */
    static List<Object> queriedKeys(Object value) {
        if (value instanceof Document) {
            Document operators = (Document) value;
            if (operators.size() != 1) {
                return null;
            }
            if (operators.containsKey("$eq")) {
                return queriedKeys(operators.get("$eq"));
            }
            Object in = operators.get("$in");
            if (!(in instanceof Collection)) {
                return null;
            }
            List<Object> keys = new ArrayList<>();
            for (Object element : (Collection<?>) in) {
                Object k = key(element);
                if (k == UNINDEXABLE) {
                    return null;
                }
                keys.add(k);
            }
            return keys;
        }
        Object k = key(value);
        return k == UNINDEXABLE ? null : List.of(k);
    }

    /** Implemented by the indexes that offer candidates to {@link IndexedCollection}'s queries. */
    interface Lookup {
        /**
         * A superset of the positions of the documents matching the whole filter with fewer than bound elements,
         * or null if it cannot tell or would not be smaller (then it builds nothing: a planner that already has a
         * small set pays nothing for a large one, e.g. {@code {status: {$in: [...]}}} beside {@code _id}).
         */
        Set<Integer> candidates(Document filter, int bound);

        /** Positions copied into the candidate sets it built (unions of several keys), for {@code cronswapQueryStats}. */
        long built();
    }

    /**
     * Positions by the value of one top-level field (each element of an array value too). Documents whose value is
     * missing, null or not a scalar are not in it: no equality on a scalar can match them.
     */
    static final class FieldMap {
        private final String field;
        private final Map<Object, Set<Integer>> positions = new HashMap<>();
        private long built;

        FieldMap(String field) {
            this.field = field;
        }

        private static Set<Object> keysOf(Object value) {
            if (value instanceof Collection) {
                Set<Object> keys = new HashSet<>();
                for (Object element : (Collection<?>) value) {
                    Object k = key(element);
                    if (k != UNINDEXABLE) {
                        keys.add(k);
                    }
                }
                return keys;
            }
            Object k = key(value);
            return k == UNINDEXABLE ? Set.of() : Set.of(k);
        }

        void add(Document document, Integer position) {
            for (Object k : keysOf(document.get(field))) {
                positions.computeIfAbsent(k, x -> new HashSet<>()).add(position);
            }
        }

        void remove(Document document, Integer position) {
            for (Object k : keysOf(document.get(field))) {
                Set<Integer> set = positions.get(k);
                if (set != null && set.remove(position) && set.isEmpty()) {
                    positions.remove(k);
                }
            }
        }

        void update(Document oldDocument, Document newDocument, Integer position) {
            if (Objects.equals(oldDocument.get(field), newDocument.get(field))) {
                return;
            }
            remove(oldDocument, position);
            add(newDocument, position);
        }

        /** The positions of an equality on the field (fewer than bound), or null (see {@link Lookup}). */
        Set<Integer> candidates(Document filter, int bound) {
            if (!filter.containsKey(field)) {
                return null;
            }
            List<Object> keys = queriedKeys(filter.get(field));
            if (keys == null) {
                return null;
            }
            if (keys.size() == 1) {
                Set<Integer> set = positions.getOrDefault(keys.get(0), Set.of());
                return set.size() < bound ? set : null;
            }
            long total = 0;
            for (Object k : keys) {
                total += positions.getOrDefault(k, Set.of()).size();
            }
            if (total >= bound) {
                return null;
            }
            Set<Integer> union = new HashSet<>();
            for (Object k : keys) {
                union.addAll(positions.getOrDefault(k, Set.of()));
            }
            built += total;
            return union;
        }

        long built() {
            return built;
        }

        void clear() {
            positions.clear();
        }
    }

    private static boolean topLevel(List<IndexKey> keys) {
        return keys.stream().noneMatch(k -> k.getKey().contains("."));
    }

    /**
     * A database whose collections plan queries over {@link Lookup} indexes, build non-unique indexes and report
     * their committed writes to the oplog ({@link CommittedWrites}).
     */
    static final class Database extends MemoryDatabase {
        private final Supplier<ChangeStreamOplog> oplog;

        Database(String name, CursorRegistry cursors, Supplier<ChangeStreamOplog> oplog) {
            super(name, cursors);
            this.oplog = oplog;
        }

        /** The backend's oplog; null while the superclass constructor opens the system collections. */
        private ChangeStreamOplog oplog() {
            return oplog == null ? null : oplog.get();
        }

        @Override
        protected MemoryCollection openOrCreateCollection(String collectionName, CollectionOptions options) {
            return new IndexedCollection(this, collectionName, options, cursorRegistry, this::oplog);
        }

        @Override
        protected Index<Integer> openOrCreateUniqueIndex(String collectionName, String indexName, List<IndexKey> keys,
                                                         boolean sparse) {
            if (!topLevel(keys)) {
                return super.openOrCreateUniqueIndex(collectionName, indexName, keys, sparse);
            }
            return new UniqueIndex(indexName, keys, sparse);
        }

        @Override
        protected Index<Integer> openOrCreateSecondaryIndex(String collectionName, String indexName,
                                                            List<IndexKey> keys, boolean sparse) {
            if (!topLevel(keys)) {
                return super.openOrCreateSecondaryIndex(collectionName, indexName, keys, sparse);
            }
            return new EqualityIndex(indexName, keys, sparse);
        }
    }

    /**
     * A collection whose queries start from the smallest candidate set its indexes offer, and whose writes reach the
     * oplog when they are applied ({@link CommittedWrites}).
     */
    static final class IndexedCollection extends MemoryCollection {
        /** Queries served by a scan of the whole collection, queries served from index candidates. */
        private final AtomicLong scans = new AtomicLong();
        private final AtomicLong indexed = new AtomicLong();
        /** Documents the matcher was given: the whole collection for a scan, the candidates otherwise. */
        private final AtomicLong examined = new AtomicLong();

        private final CommittedWrites committed;

        /** One past the highest position a document was ever stored at: below it, a document or a hole (null). */
        private int extent;
        /** Set when the collection is dropped: a {@link StreamedFind} reading it fails. */
        private volatile boolean dropped;

        IndexedCollection(Database database, String name, CollectionOptions options, CursorRegistry cursors,
                          Supplier<ChangeStreamOplog> oplog) {
            super(database, name, options, cursors);
            committed = new CommittedWrites(this, oplog);
        }

        @Override
        public synchronized void addDocument(Document document) {
            super.addDocument(document);
            committed.inserted(document);
        }

        @Override
        protected synchronized Integer addDocumentInternal(Document document) {
            Integer position = super.addDocumentInternal(document);
            extent = Math.max(extent, position + 1);
            return position;
        }

        @Override
        public void drop() {
            dropped = true;
            super.drop();
        }

        /** Whether the collection was dropped. */
        boolean isDropped() {
            return dropped;
        }

        /**
         * The filter of the leading {@code $match} of an aggregate of this collection, set by {@link CompatBackend}
         * on the thread that runs it and taken by the aggregation's read of the collection ({@link
         * #queryAllAsStream}).
         */
        private final ThreadLocal<Document> leadingMatch = new ThreadLocal<>();

        /**
         * Runs an aggregate whose pipeline begins with {@code {$match: filter}}: the aggregation reads only the
         * candidates an index offers for the filter, as a server's does, instead of the whole collection (the library
         * reads every document and matches each). The {@code $match} stage still applies the whole filter to each, so
         * the result is unchanged.
         */
        <T> T withLeadingMatch(Document filter, Supplier<T> aggregate) {
            leadingMatch.set(filter);
            try {
                return aggregate.get();
            } finally {
                leadingMatch.remove();
            }
        }

        /**
         * The whole collection, or, for the first read of an aggregate with a leading {@code $match} ({@link
         * #withLeadingMatch}), the candidates an index offers for its filter, in position order (as a scan visits
         * them); counted in the query counters as an indexed query, or as a scan when no index offers any.
         */
        @Override
        public synchronized Stream<Document> queryAllAsStream() {
            Document filter = leadingMatch.get();
            if (filter == null) {
                return super.queryAllAsStream();
            }
            leadingMatch.remove(); // the aggregation's source only, not a later read of the same collection
            Set<Integer> candidates = candidates(filter, count() / 2 + 16);
            if (candidates == null) {
                return super.queryAllAsStream(); // counted as a scan by queryDocuments
            }
            indexed.incrementAndGet();
            examined.addAndGet(candidates.size());
            List<Integer> ordered = new ArrayList<>(candidates);
            Collections.sort(ordered);
            List<Document> documents = new ArrayList<>(ordered.size());
            for (Integer position : ordered) {
                Document document = getDocument(position);
                if (document != null) {
                    documents.add(document);
                }
            }
            return documents.stream();
        }

        /**
         * Whether a find with this filter scans the collection (no index offers candidates), as a {@link StreamedFind}
         * reads it; if so, it is counted as a scan in the query counters.
         */
        synchronized boolean startScan(Document filter) {
            if (candidates(filter, count() / 2 + 16) != null) {
                return false;
            }
            scans.incrementAndGet();
            return true;
        }

        /**
         * Where a {@link #scan} step stopped: the next position to examine; whether it stopped because the batch is
         * complete (its budget full, or the next match did not fit); whether no position is left.
         */
        record Scan(int next, boolean stopped, boolean exhausted) {
        }

        /**
         * One step of a {@link StreamedFind}: from position {@code from} on, at most {@code maxExamined} positions,
         * adds to {@code batch} a deep copy of each document matching {@code filter} (projected when {@code
         * projection} is not null) while {@code budget} admits it. A match the budget refuses is not passed: the
         * next step examines it again. The caller holds the read lock, so the copies are whole.
         */
        synchronized Scan scan(int from, int maxExamined, Document filter, Document projection,
                               ServerBatches.Budget budget, List<Document> batch) {
            int position = from;
            long seen = 0;
            boolean stopped = false;
            while (position < extent && position - from < maxExamined) {
                if (budget.full()) {
                    stopped = true;
                    break;
                }
                Document stored = getDocument(position);
                if (stored != null) {
                    seen++;
                    Document match = matched(stored, filter, projection);
                    if (match != null) {
                        if (!budget.admit(match)) {
                            stopped = true;
                            break;
                        }
                        batch.add(match.cloneDeeply());
                    }
                }
                position++;
            }
            examined.addAndGet(seen);
            return new Scan(position, stopped || budget.full(), position >= extent);
        }

        /** The document as the find returns it (projected), or null if it does not match the filter. */
        private Document matched(Document stored, Document filter, Document projection) {
            if (projection == null) {
                return documentMatchesQuery(stored, filter) ? stored : null;
            }
            // the library's own matching and projection (a positional projection needs the filter)
            for (Document projected : matchDocumentsFromStream(filter, Stream.of(stored), 0, 0, 0, null, projection)) {
                return projected;
            }
            return null;
        }

        @Override
        protected void removeDocument(Integer position) {
            Document document = getDocument(position);
            super.removeDocument(position);
            committed.deleted(document);
        }

        @Override
        protected void handleUpdate(Integer position, Document oldDocument, Document newDocument) {
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

        /**
         * The library keeps the data size up to date by encoding the document (twice for an update: before and
         * after) on every write; only collStats and dataSize read it, so it is computed when they ask.
         */
        @Override
        protected boolean tracksDataSize() {
            return false;
        }

        @Override
        protected synchronized int getDataSize() {
            long size = 0;
            for (Document document : queryAll()) {
                ByteBuf buffer = Unpooled.buffer();
                try {
                    BsonEncoder.encodeDocument(document, buffer);
                    size += buffer.writerIndex();
                } finally {
                    buffer.release();
                }
            }
            return (int) Math.min(Integer.MAX_VALUE, size);
        }

        /** The documents the collection's queries gave to the matcher so far (the counters' {@code examined}). */
        long examinedSoFar() {
            return examined.get();
        }

        /** The query counters ({@code cronswapQueryStats}): scans, indexed, examined, built. */
        synchronized Document queryStats() {
            long built = 0;
            for (Index<Integer> index : getIndexes()) {
                if (index instanceof Lookup) {
                    built += ((Lookup) index).built();
                }
            }
            return new Document("scans", scans.get()).append("indexed", indexed.get())
                .append("examined", examined.get()).append("built", built);
        }

        /**
         * Synchronized like the library's query entry points, also for the one that is not (count with a filter):
         * the candidate sets are the indexes' own, read while no write changes them.
         */
        @Override
        protected synchronized QueryResult queryDocuments(Document query, Document orderBy, int numberToSkip,
                                                          int limit, int batchSize, Document fieldSelector) {
            // past half the collection a scan is no slower, and it is what the library does
            Set<Integer> candidates = query == null ? null : candidates(query, count() / 2 + 16);
            if (candidates == null) {
                scans.incrementAndGet();
                examined.addAndGet(count());
                return super.queryDocuments(query, orderBy, numberToSkip, limit, batchSize, fieldSelector);
            }
            indexed.incrementAndGet();
            examined.addAndGet(candidates.size());
            List<Integer> ordered = new ArrayList<>(candidates);
            Collections.sort(ordered);
            if (isNaturalDescending(orderBy)) {
                Collections.reverse(ordered);
            }
            return matchDocuments(query, ordered, orderBy, numberToSkip, limit, batchSize, fieldSelector);
        }

        /**
         * The smallest candidate set (fewer than bound) any index offers for any condition, or null. Cheap
         * conditions first: plain equalities, then operators ({@code $in}), then {@code $and}/{@code $or}, each
         * bounded by the best so far.
         */
        private Set<Integer> candidates(Document filter, int bound) {
            Set<Integer> best = null;
            // a unique index on several fields, all named with equalities: at most one position
            for (Index<Integer> index : getIndexes()) {
                if (index instanceof UniqueIndex && index.getKeys().size() > 1) {
                    best = smaller(best, ((UniqueIndex) index).exact(filter));
                }
            }
            for (int pass = 0; pass < 3; pass++) {
                for (Map.Entry<String, Object> condition : filter.entrySet()) {
                    if (best != null && best.isEmpty()) {
                        return best;
                    }
                    String key = condition.getKey();
                    Object value = condition.getValue();
                    boolean operator = key.startsWith("$");
                    int kind = operator ? 2 : value instanceof Document ? 1 : 0;
                    if (kind != pass) {
                        continue;
                    }
                    int limit = best == null ? bound : Math.min(bound, best.size());
                    if (key.equals("$and") && value instanceof List) {
                        for (Object branch : (List<?>) value) {
                            if (branch instanceof Document) {
                                best = smaller(best, candidates((Document) branch, limit));
                                limit = best == null ? bound : Math.min(bound, best.size());
                            }
                        }
                    } else if (key.equals("$or") && value instanceof List) {
                        best = smaller(best, union((List<?>) value, limit));
                    } else if (!operator) {
                        Document single = new Document(key, value);
                        for (Index<Integer> index : getIndexes()) {
                            if (index instanceof Lookup) {
                                best = smaller(best, ((Lookup) index).candidates(single, limit));
                                limit = best == null ? bound : Math.min(bound, best.size());
                            }
                        }
                    }
                }
            }
            return best;
        }

        private Set<Integer> union(List<?> branches, int bound) {
            Set<Integer> union = new HashSet<>();
            for (Object branch : branches) {
                Set<Integer> c = branch instanceof Document ? candidates((Document) branch, bound) : null;
                if (c == null) {
                    return null;
                }
                union.addAll(c);
                if (union.size() >= bound) {
                    return null;
                }
            }
            return union;
        }

        private static Set<Integer> smaller(Set<Integer> a, Set<Integer> b) {
            if (a == null) {
                return b;
            }
            return b != null && b.size() < a.size() ? b : a;
        }
    }

    /**
     * A unique index that looks up equalities on all its fields (or, through a {@link FieldMap}, on its first field
     * alone), and skips the library's key computations when an update leaves its fields as they were.
     */
    static final class UniqueIndex extends MemoryUniqueIndex implements Lookup {
        private final List<String> fields = new ArrayList<>();
        /** Positions by the first field, for filters naming only it (null for a single-field index). */
        private final FieldMap first;

        UniqueIndex(String name, List<IndexKey> keys, boolean sparse) {
            super(name, keys, sparse);
            keys.forEach(k -> fields.add(k.getKey()));
            first = fields.size() > 1 ? new FieldMap(fields.get(0)) : null;
        }

        private boolean sameKeys(Document oldDocument, Document newDocument) {
            for (String field : fields) {
                if (!Objects.equals(oldDocument.get(field), newDocument.get(field))) {
                    return false;
                }
            }
            return true;
        }

        @Override
        public synchronized Set<Integer> candidates(Document filter, int bound) {
            if (first != null) {
                return first.candidates(filter, bound);
            }
            String field = fields.get(0);
            List<Object> keys = filter.containsKey(field) ? queriedKeys(filter.get(field)) : null;
            if (keys == null || keys.size() >= bound) {
                return null;
            }
            Set<Integer> out = new HashSet<>();
            for (Object k : keys) {
                Integer position = getPosition(new KeyValue(k));
                if (position != null) {
                    out.add(position);
                }
            }
            return out;
        }

        @Override
        public synchronized long built() {
            return first == null ? 0 : first.built();
        }

        /** For an index on several fields: the position of equalities on all of them, or null. */
        synchronized Set<Integer> exact(Document filter) {
            List<Object> values = new ArrayList<>();
            for (String field : fields) {
                List<Object> keys = filter.containsKey(field) ? queriedKeys(filter.get(field)) : null;
                if (keys == null || keys.size() != 1) {
                    return null;
                }
                values.add(keys.get(0));
            }
            Integer position = getPosition(new KeyValue(values));
            return position == null ? Set.of() : Set.of(position);
        }

        /**
         * The index key of a document whose indexed fields are all scalars (or missing, null: the key holds null
         * as the library's does), computed once; null when the library's own computation is needed (arrays,
         * subdocuments, other types, sparse indexes).
         */
        private KeyValue fastKey(Document document) {
            if (isSparse()) {
                return null;
            }
            List<Object> values = new ArrayList<>(fields.size());
            for (String field : fields) {
                Object value = document.get(field);
                if (value == null) {
                    values.add(null);
                    continue;
                }
                Object k = key(value);
                if (k == UNINDEXABLE) {
                    return null;
                }
                values.add(k);
            }
            return new KeyValue(values);
        }

        private KeyValue rawKey(Document document) {
            List<Object> values = new ArrayList<>(fields.size());
            fields.forEach(field -> values.add(document.get(field)));
            return new KeyValue(values);
        }

        @Override
        public synchronized void checkAdd(Document document, MongoCollection<Integer> collection) {
            KeyValue k = fastKey(document);
            if (k == null) {
                super.checkAdd(document, collection);
            } else if (getPosition(k) != null) {
                throw new DuplicateKeyError(this, collection, getKeys(), rawKey(document));
            }
        }

        @Override
        public synchronized void add(Document document, Integer position, MongoCollection<Integer> collection) {
            KeyValue k = fastKey(document);
            if (k == null) {
                super.add(document, position, collection);
            } else {
                checkAdd(document, collection);
                putKeyPosition(k, position);
            }
            if (first != null) {
                first.add(document, position);
            }
        }

        @Override
        public synchronized Integer remove(Document document) {
            KeyValue k = fastKey(document);
            Integer position = k == null ? super.remove(document) : removeDocument(k);
            if (first != null && position != null) {
                first.remove(document, position);
            }
            return position;
        }

        @Override
        public Integer getPosition(Document document) {
            KeyValue k = fastKey(document);
            return k == null ? super.getPosition(document) : getPosition(k);
        }

        @Override
        public synchronized void checkUpdate(Document oldDocument, Document newDocument,
                                             MongoCollection<Integer> collection) {
            if (!sameKeys(oldDocument, newDocument)) {
                super.checkUpdate(oldDocument, newDocument, collection);
            }
        }

        @Override
        public synchronized void updateInPlace(Document oldDocument, Document newDocument, Integer position,
                                               MongoCollection<Integer> collection) {
            if (sameKeys(oldDocument, newDocument)) {
                return;
            }
            super.updateInPlace(oldDocument, newDocument, position, collection);
            if (first != null) {
                first.update(oldDocument, newDocument, position);
            }
        }

        @Override
        public synchronized void drop() {
            if (first != null) {
                first.clear();
            }
            super.drop();
        }
    }

    /**
     * A non-unique index: positions by the value of its first field. It enforces nothing and answers equalities on
     * that field; the other fields of a compound index are left to the matcher.
     */
    static final class EqualityIndex extends Index<Integer> implements Lookup {
        private final FieldMap first;
        /** Every indexed document's position by its normalised _id, for {@link #remove}. */
        private final Map<Object, Integer> positionsById = new HashMap<>();

        EqualityIndex(String name, List<IndexKey> keys, boolean sparse) {
            super(name, keys, sparse);
            first = new FieldMap(keys.get(0).getKey());
        }

        private static Object id(Document document) {
            Object id = document.get("_id");
            Object k = key(id);
            return k == UNINDEXABLE ? new OtherId(id) : k;
        }

        /** An _id that is no scalar (a subdocument, binary…): equal as the library compares values. */
        private record OtherId(Object value) {
            @Override
            public boolean equals(Object o) {
                return o instanceof OtherId && ValueComparator.asc().compare(value, ((OtherId) o).value) == 0;
            }

            @Override
            public int hashCode() {
                return 0; // rare: a list of them is searched
            }
        }

        @Override
        public synchronized Set<Integer> candidates(Document filter, int bound) {
            return first.candidates(filter, bound);
        }

        @Override
        public synchronized long built() {
            return first.built();
        }

        @Override
        public Integer getPosition(Document document) {
            return null; // the unique indexes tell
        }

        @Override
        public void checkAdd(Document document, MongoCollection<Integer> collection) {
        }

        @Override
        public synchronized void add(Document document, Integer position, MongoCollection<Integer> collection) {
            positionsById.put(id(document), position);
            first.add(document, position);
        }

        @Override
        public synchronized Integer remove(Document document) {
            Integer position = positionsById.remove(id(document));
            if (position != null) {
                first.remove(document, position);
            }
            return position;
        }

        @Override
        public boolean canHandle(Document query) {
            return false; // the collection asks candidates() instead
        }

        @Override
        public Iterable<Integer> getPositions(Document query) {
            throw new UnsupportedOperationException();
        }

        @Override
        public synchronized long getCount() {
            return positionsById.size();
        }

        @Override
        public long getDataSize() {
            return getCount();
        }

        @Override
        public void checkUpdate(Document oldDocument, Document newDocument, MongoCollection<Integer> collection) {
        }

        @Override
        public synchronized void updateInPlace(Document oldDocument, Document newDocument, Integer position,
                                               MongoCollection<Integer> collection) {
            first.update(oldDocument, newDocument, position);
        }

        @Override
        public synchronized void drop() {
            first.clear();
            positionsById.clear();
        }
    }
}
