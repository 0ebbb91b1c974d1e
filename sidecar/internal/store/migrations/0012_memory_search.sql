-- Faster keyword search (memory package). The full-text index also holds each chunk's
-- namespace as one token ("n" and the namespace in hex, a generated column), so a
-- search intersects posting lists instead of first collecting every id the user owns;
-- prefix indexes make "term*" cheap; and a vocabulary table gives each term's document
-- count, so a search can leave out words nobody wrote and rank rare words first.
-- sqlite:
ALTER TABLE memory_chunks ADD COLUMN ns TEXT GENERATED ALWAYS AS ('n' || lower(hex(namespace))) VIRTUAL;

DROP TRIGGER memory_chunks_ai;
DROP TRIGGER memory_chunks_ad;
DROP TRIGGER memory_chunks_au;
DROP TABLE memory_fts;

CREATE VIRTUAL TABLE memory_fts USING fts5(
    content,
    ns,
    content = 'memory_chunks',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2',
    prefix = '3 4 5'
);
CREATE VIRTUAL TABLE memory_fts_vocab USING fts5vocab(memory_fts, 'row');

CREATE TRIGGER memory_chunks_ai AFTER INSERT ON memory_chunks BEGIN
    INSERT INTO memory_fts (rowid, content, ns) VALUES (new.id, new.content, new.ns);
END;
CREATE TRIGGER memory_chunks_ad AFTER DELETE ON memory_chunks BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, content, ns) VALUES ('delete', old.id, old.content, old.ns);
END;
CREATE TRIGGER memory_chunks_au AFTER UPDATE OF content, namespace ON memory_chunks BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, content, ns) VALUES ('delete', old.id, old.content, old.ns);
    INSERT INTO memory_fts (rowid, content, ns) VALUES (new.id, new.content, new.ns);
END;

INSERT INTO memory_fts (memory_fts) VALUES ('rebuild');
-- postgres:
-- On PostgreSQL the keyword index is a tsvector of each chunk (the 'simple'
-- configuration: no stemming, like unicode61) with a GIN index; the namespace is a
-- plain column condition.
ALTER TABLE memory_chunks ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED;
CREATE INDEX memory_chunks_tsv ON memory_chunks USING gin (tsv);
