<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Db;

use OCP\DB\QueryBuilder\IQueryBuilder;
use OCP\IDBConnection;

/**
 * OutboxMapper owns the SQL of the istota_outbox table. Rows are delivered strictly in
 * id order, so every read is ordered by id.
 */
class OutboxMapper {
	public const TABLE = 'istota_outbox';
	/** last_error is a VARCHAR of this many characters (see the migration). */
	public const MAX_ERROR_LENGTH = 1000;
	/** conversation_token and message_id are VARCHARs of this many characters. */
	public const MAX_ID_LENGTH = 64;

	public function __construct(
		private readonly IDBConnection $db,
	) {
	}

	/**
	 * Appends an event and returns its id. A row may start with attempts > 0 when a direct
	 * delivery was already tried and failed.
	 */
	public function enqueue(string $body, string $conversationToken, string $messageId, int $now, int $attempts = 0, string $lastError = '', ?int $nextAttemptAt = null): int {
		$qb = $this->db->getQueryBuilder();
		$qb->insert(self::TABLE)
			->values([
				'body' => $qb->createNamedParameter($body, IQueryBuilder::PARAM_STR),
				'conversation_token' => $qb->createNamedParameter($this->nullable($conversationToken, self::MAX_ID_LENGTH), $conversationToken === '' ? IQueryBuilder::PARAM_NULL : IQueryBuilder::PARAM_STR),
				'message_id' => $qb->createNamedParameter($this->nullable($messageId, self::MAX_ID_LENGTH), $messageId === '' ? IQueryBuilder::PARAM_NULL : IQueryBuilder::PARAM_STR),
				'created_at' => $qb->createNamedParameter($now, IQueryBuilder::PARAM_INT),
				'attempts' => $qb->createNamedParameter($attempts, IQueryBuilder::PARAM_INT),
				'last_error' => $qb->createNamedParameter($this->nullable($lastError, self::MAX_ERROR_LENGTH), $lastError === '' ? IQueryBuilder::PARAM_NULL : IQueryBuilder::PARAM_STR),
				'next_attempt_at' => $qb->createNamedParameter($nextAttemptAt ?? $now, IQueryBuilder::PARAM_INT),
			]);
		$qb->executeStatement();
		return $qb->getLastInsertId();
	}

	/** Whether any event is waiting; the listener then appends instead of overtaking. */
	public function hasPending(): bool {
		$qb = $this->db->getQueryBuilder();
		$qb->select('id')
			->from(self::TABLE)
			->setMaxResults(1);
		$result = $qb->executeQuery();
		$row = $result->fetch();
		$result->closeCursor();
		return $row !== false && $row !== null;
	}

	/**
	 * The oldest waiting events, in delivery order.
	 *
	 * @return list<OutboxEntry>
	 */
	public function head(int $limit): array {
		$qb = $this->db->getQueryBuilder();
		$qb->select('id', 'body', 'conversation_token', 'message_id', 'created_at', 'attempts', 'last_error', 'next_attempt_at')
			->from(self::TABLE)
			->orderBy('id', 'ASC')
			->setMaxResults($limit);
		$result = $qb->executeQuery();
		$entries = [];
		while (($row = $result->fetch()) !== false && $row !== null) {
			$entries[] = OutboxEntry::fromRow($row);
		}
		$result->closeCursor();
		return $entries;
	}

	public function count(): int {
		$qb = $this->db->getQueryBuilder();
		$qb->select($qb->func()->count('*', 'depth'))
			->from(self::TABLE);
		$result = $qb->executeQuery();
		$row = $result->fetch();
		$result->closeCursor();
		return is_array($row) ? (int)$row['depth'] : 0;
	}

	/** Removes a delivered event. */
	public function delete(int $id): void {
		$qb = $this->db->getQueryBuilder();
		$qb->delete(self::TABLE)
			->where($qb->expr()->eq('id', $qb->createNamedParameter($id, IQueryBuilder::PARAM_INT)));
		$qb->executeStatement();
	}

	/** Records a failed delivery attempt. */
	public function markFailed(int $id, int $attempts, string $error, int $nextAttemptAt): void {
		$qb = $this->db->getQueryBuilder();
		$qb->update(self::TABLE)
			->set('attempts', $qb->createNamedParameter($attempts, IQueryBuilder::PARAM_INT))
			->set('last_error', $qb->createNamedParameter($this->nullable($error, self::MAX_ERROR_LENGTH), $error === '' ? IQueryBuilder::PARAM_NULL : IQueryBuilder::PARAM_STR))
			->set('next_attempt_at', $qb->createNamedParameter($nextAttemptAt, IQueryBuilder::PARAM_INT))
			->where($qb->expr()->eq('id', $qb->createNamedParameter($id, IQueryBuilder::PARAM_INT)));
		$qb->executeStatement();
	}

	/**
	 * Empty strings are stored as NULL: Oracle cannot tell them apart, so the columns are
	 * nullable and '' never reaches the database.
	 */
	private function nullable(string $value, int $maxLength): ?string {
		return $value === '' ? null : mb_substr($value, 0, $maxLength);
	}
}
