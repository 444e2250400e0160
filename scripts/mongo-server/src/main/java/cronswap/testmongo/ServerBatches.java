package cronswap.testmongo;

import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import de.bwaldvogel.mongo.backend.AbstractCursor;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.Missing;
import de.bwaldvogel.mongo.bson.BinData;
import de.bwaldvogel.mongo.bson.BsonJavaScript;
import de.bwaldvogel.mongo.bson.BsonRegularExpression;
import de.bwaldvogel.mongo.bson.BsonTimestamp;
import de.bwaldvogel.mongo.bson.Decimal128;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.bson.LegacyUUID;
import de.bwaldvogel.mongo.bson.MaxKey;
import de.bwaldvogel.mongo.bson.MinKey;
import de.bwaldvogel.mongo.bson.ObjectId;
import de.bwaldvogel.mongo.wire.bson.BsonEncoder;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;

/**
 * Cursor batches cut as a server cuts them. The library puts a whole result in the first reply unless the command
 * names a batchSize (300,000 schedules came back as one reply, and past about 48 MB the Go driver refuses the
 * message: "length of read message too large"). A server instead sends:
 *
 * <ul>
 * <li>in the first batch of a {@code find} or {@code aggregate}: {@code batchSize} documents when the command names
 * one (0: none, the cursor only), else {@link #DEFAULT_FIRST_BATCH};</li>
 * <li>in a {@code getMore}: {@code batchSize} documents when named, else as many as fit;</li>
 * <li>in any reply: documents only while their BSON sizes add up to at most {@link #MAX_BATCH_BYTES}, and always at
 * least one (mongod's {@code FindCommon::haveSpaceForNext}).</li>
 * </ul>
 *
 * The rest stays in a {@link Batched} cursor for the getMores; {@code singleBatch} returns the first batch and no
 * cursor. Change-stream cursors apply the same byte bound ({@link Budget}) to the events they return.
 */
final class ServerBatches {

    /** Documents in a find's or aggregate's first batch when the command names no batchSize, as on a server. */
    static final int DEFAULT_FIRST_BATCH = 101;

    /** The most bytes of documents one reply carries: BSONObjMaxUserSize, 16 MiB. */
    static final int MAX_BATCH_BYTES = 16 * 1024 * 1024;

    private ServerBatches() {
    }

    /**
     * The first-batch count a find or aggregate asks for: its batchSize ({@code batchSize} of a find, {@code
     * cursor.batchSize} of an aggregate; null when absent), else {@link #DEFAULT_FIRST_BATCH}.
     */
    static int firstBatchCount(Object batchSize) {
        return batchSize instanceof Number ? Math.max(0, ((Number) batchSize).intValue()) : DEFAULT_FIRST_BATCH;
    }

    /**
     * Cuts the first batch of a cursor reply the library built whole ({@code cursor.firstBatch}, cursor id 0) to
     * {@code count} documents and the byte bound, and keeps the rest in a new cursor registered in {@code
     * registry}, whose id the reply then carries; with {@code singleBatch} the rest is dropped instead. A reply
     * that already fits, or that has a cursor of its own, is returned as it is.
     */
    @SuppressWarnings("unchecked")
    static Document cutFirstBatch(CursorRegistry registry, Document response, int count, boolean singleBatch) {
        Object cursorObject = response.get("cursor");
        if (!(cursorObject instanceof Document)) {
            return response;
        }
        Document cursor = (Document) cursorObject;
        Object id = cursor.get("id");
        Object batchObject = cursor.get("firstBatch");
        if (!(id instanceof Number) || ((Number) id).longValue() != 0 || !(batchObject instanceof List)) {
            return response;
        }
        List<Document> all = (List<Document>) batchObject;
        int n = fit(all, 0, count);
        if (n == all.size()) {
            return response;
        }
        cursor.put("firstBatch", new ArrayList<>(all.subList(0, n)));
        if (!singleBatch) {
            Batched rest = new Batched(registry.generateCursorId(), String.valueOf(cursor.get("ns")), all, n);
            registry.add(rest);
            cursor.put("id", rest.getId());
        }
        return response;
    }

    /** How many documents of {@code docs} from {@code from} on make one batch of at most {@code count}. */
    static int fit(List<Document> docs, int from, int count) {
        Budget budget = new Budget(count);
        int i = from;
        while (i < docs.size() && budget.admit(docs.get(i))) {
            i++;
        }
        return i - from;
    }

    /**
     * One reply's allowance: at most {@code count} documents, and documents only while their sizes add up to at most
     * {@link #MAX_BATCH_BYTES}, the first always.
     */
    static final class Budget {
        private final int count;
        private int taken;
        private long bytes;

        Budget(int count) {
            this.count = count;
        }

        /** Whether the batch holds as many documents as it may. */
        boolean full() {
            return taken >= count;
        }

        /** Whether {@code document} goes in the batch; counts it if so. */
        boolean admit(Document document) {
            if (taken >= count) {
                return false;
            }
            long size = BsonSize.of(document);
            if (taken > 0 && bytes + size > MAX_BATCH_BYTES) {
                return false;
            }
            taken++;
            bytes += size;
            return true;
        }
    }

    /**
     * The documents of a find or aggregate left after its first batch, handed out by getMore in batches a server
     * would send.
     */
    static final class Batched extends AbstractCursor {
        private final String ns;
        private final List<Document> documents;
        private int next;

        Batched(long id, String ns, List<Document> documents, int next) {
            super(id);
            this.ns = ns;
            this.documents = documents;
            this.next = next;
        }

        /** The namespace the getMore replies name. */
        String ns() {
            return ns;
        }

        @Override
        public synchronized boolean isEmpty() {
            return next >= documents.size();
        }

        /** The next batch: {@code numberToReturn} documents (0 or less: no count bound) within the byte bound. */
        @Override
        public synchronized List<Document> takeDocuments(int numberToReturn) {
            int n = fit(documents, next, numberToReturn > 0 ? numberToReturn : Integer.MAX_VALUE);
            List<Document> batch = new ArrayList<>(documents.subList(next, next + n));
            next += n;
            return batch;
        }
    }

    /**
     * A getMore on a {@link Batched} cursor: the next batch ({@code batchSize} when given), and cursor id 0 once
     * the cursor is exhausted (it is then removed from the registry), as a server answers.
     */
    static Document getMore(CursorRegistry registry, Batched cursor, Document query) {
        Object batchSize = query.get("batchSize");
        List<Document> batch = cursor.takeDocuments(batchSize instanceof Number ? ((Number) batchSize).intValue() : 0);
        long id = cursor.getId();
        if (cursor.isEmpty()) {
            registry.remove(cursor);
            id = 0;
        }
        Document reply = new Document("id", id).append("ns", cursor.ns()).append("nextBatch", batch);
        return new Document("cursor", reply).append("ok", 1.0);
    }

    /** BSON sizes of the library's values, computed without encoding them (for the common types). */
    static final class BsonSize {
        private BsonSize() {
        }

        /** The encoded size of a document. */
        static long of(Map<String, ?> document) {
            long size = 4 + 1; // length, terminator
            for (Map.Entry<String, ?> entry : document.entrySet()) {
                size += 1 + cString(entry.getKey()) + value(entry.getValue());
            }
            return size;
        }

        private static long array(Collection<?> values) {
            long size = 4 + 1;
            int i = 0;
            for (Object value : values) {
                size += 1 + cString(Integer.toString(i++)) + value(value);
            }
            return size;
        }

        private static long cString(String s) {
            return utf8Length(s) + 1;
        }

        private static long value(Object value) {
            if (value == null || value instanceof Missing || value instanceof MinKey || value instanceof MaxKey) {
                return 0;
            } else if (value instanceof String) {
                return 4 + utf8Length((String) value) + 1;
            } else if (value instanceof Map) {
                @SuppressWarnings("unchecked")
                Map<String, ?> map = (Map<String, ?>) value;
                return of(map);
            } else if (value instanceof Collection) {
                return array((Collection<?>) value);
            } else if (value instanceof Integer) {
                return 4;
            } else if (value instanceof Long || value instanceof Double || value instanceof Instant
                || value instanceof BsonTimestamp) {
                return 8;
            } else if (value instanceof Boolean) {
                return 1;
            } else if (value instanceof ObjectId) {
                return 12;
            } else if (value instanceof Decimal128) {
                return 16;
            } else if (value instanceof BinData) {
                return 4 + 1 + ((BinData) value).getData().length;
            } else if (value instanceof UUID || value instanceof LegacyUUID) {
                return 4 + 1 + 16;
            } else if (value instanceof BsonRegularExpression) {
                BsonRegularExpression regex = (BsonRegularExpression) value;
                return cString(regex.getPattern()) + cString(regex.getOptions());
            } else if (value instanceof BsonJavaScript) {
                return 4 + utf8Length(((BsonJavaScript) value).getCode()) + 1;
            }
            return encoded(value);
        }

        /** Any other type: as the library's encoder writes it. */
        private static long encoded(Object value) {
            ByteBuf buffer = Unpooled.buffer();
            try {
                BsonEncoder.encodeValue(BsonEncoder.determineType(value), value, buffer);
                return buffer.writerIndex();
            } finally {
                buffer.release();
            }
        }

        private static long utf8Length(String s) {
            long n = 0;
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                if (c < 0x80) {
                    n++;
                } else if (c < 0x800) {
                    n += 2;
                } else if (Character.isHighSurrogate(c) && i + 1 < s.length()
                    && Character.isLowSurrogate(s.charAt(i + 1))) {
                    n += 4;
                    i++;
                } else if (Character.isSurrogate(c)) {
                    n++; // unpaired: String.getBytes writes '?'
                } else {
                    n += 3;
                }
            }
            return n;
        }
    }
}
