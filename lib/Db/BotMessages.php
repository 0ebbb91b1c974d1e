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
 * BotMessages reads Nextcloud's comments table, where Talk keeps chat messages, to tell
 * whether a bot message with a given referenceId was posted. The sidecar asks when it
 * does not know whether a send went through (it was killed, or the connection broke
 * after the request left): Talk's bot API neither returns the new message's id nor
 * refuses a repeated referenceId, and a bot cannot read the chat.
 */
class BotMessages {
	/** Talk stores chat messages as comments on objects of this type. */
	private const OBJECT_TYPE = 'chat';
	private const ACTOR_TYPE = 'bots';
	/** Talk keeps the first 64 characters of a referenceId. */
	private const MAX_REFERENCE_LENGTH = 64;

	public function __construct(
		private readonly IDBConnection $db,
	) {
	}

	/**
	 * The referenceIds among $referenceIds that a bot message in conversation $token
	 * carries. The lookup goes through the conversation's id (Talk's rooms table is
	 * indexed by token, comments by object), so it stays cheap on a large instance.
	 *
	 * @param list<string> $referenceIds
	 * @return list<string>
	 */
	public function posted(string $token, array $referenceIds): array {
		$qb = $this->db->getQueryBuilder();
		$qb->select('id')
			->from('talk_rooms')
			->where($qb->expr()->eq('token', $qb->createNamedParameter($token, IQueryBuilder::PARAM_STR)))
			->setMaxResults(1);
		$result = $qb->executeQuery();
		$room = $result->fetch();
		$result->closeCursor();
		if ($room === false || $room === null) {
			return [];
		}
		$found = [];
		foreach (array_unique($referenceIds) as $ref) {
			if ($ref === '' || strlen($ref) > self::MAX_REFERENCE_LENGTH) {
				continue;
			}
			$qb = $this->db->getQueryBuilder();
			$qb->select('id')
				->from('comments')
				->where(
					$qb->expr()->eq('reference_id', $qb->createNamedParameter($ref, IQueryBuilder::PARAM_STR)),
					$qb->expr()->eq('object_type', $qb->createNamedParameter(self::OBJECT_TYPE, IQueryBuilder::PARAM_STR)),
					$qb->expr()->eq('object_id', $qb->createNamedParameter((string)$room['id'], IQueryBuilder::PARAM_STR)),
					$qb->expr()->eq('actor_type', $qb->createNamedParameter(self::ACTOR_TYPE, IQueryBuilder::PARAM_STR)),
				)
				->setMaxResults(1);
			$result = $qb->executeQuery();
			$row = $result->fetch();
			$result->closeCursor();
			if ($row !== false && $row !== null) {
				$found[] = $ref;
			}
		}
		return $found;
	}
}
