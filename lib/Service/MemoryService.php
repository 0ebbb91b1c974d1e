<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\Exception\InvalidInputException;
use OCA\Istota\Exception\SidecarException;

/**
 * MemoryService is the personal page's "Memory" area: USER.md with conflict detection,
 * the curation audit, CHANNEL.md of the user's conversations, dated memories, knowledge
 * facts and memory search. Every call names the user from the Nextcloud session; the
 * sidecar answers 404 for anything that is not this user's.
 */
class MemoryService {
	/** USER.md is at most 64 KiB on the sidecar; refuse bigger edits before sending them. */
	public const MAX_USER_MD_BYTES = 65536;
	public const MAX_QUERY_CHARS = 500;

	public function __construct(
		private readonly SidecarClient $client,
		private readonly SessionService $sessions,
	) {
	}

	/**
	 * @return array<string, mixed> {"content", "etag"}
	 * @throws SidecarException
	 */
	public function userMemory(string $uid): array {
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->getJson(SidecarClient::userPath($uid, 'memory/user'));
	}

	/**
	 * Saves USER.md if it is still at $etag; the sidecar answers 409 conflict otherwise.
	 *
	 * @return array<string, mixed> {"etag"}
	 * @throws SidecarException
	 * @throws InvalidInputException
	 */
	public function saveUserMemory(string $uid, mixed $content, mixed $etag): array {
		if (!is_string($content)) {
			throw new InvalidInputException('"content" must be text');
		}
		if (!is_string($etag)) {
			throw new InvalidInputException('"etag" must be the ETag the edit started from');
		}
		if (strlen($content) > self::MAX_USER_MD_BYTES) {
			throw new InvalidInputException('USER.md may be at most 64 KiB');
		}
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->putJson(SidecarClient::userPath($uid, 'memory/user'), ['content' => $content, 'etag' => $etag]);
	}

	/**
	 * @return array<string, mixed> {"entries": [...]}
	 * @throws SidecarException
	 */
	public function audit(string $uid, int $limit): array {
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->getJson(SidecarClient::userPath($uid, 'memory/audit', ['limit' => self::clamp($limit, 1, 500)]));
	}

	/**
	 * @return array<string, mixed> {"channels": [...]}
	 * @throws SidecarException
	 */
	public function channels(string $uid): array {
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->getJson(SidecarClient::userPath($uid, 'memory/channels'));
	}

	/**
	 * @return array<string, mixed> {"days": [...]}
	 * @throws SidecarException
	 */
	public function dated(string $uid, int $days): array {
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->getJson(SidecarClient::userPath($uid, 'memory/dated', ['days' => self::clamp($days, 1, 366)]));
	}

	/**
	 * @return array<string, mixed> {"facts": [...]}
	 * @throws SidecarException
	 */
	public function facts(string $uid): array {
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->getJson(SidecarClient::userPath($uid, 'memory/facts'));
	}

	/**
	 * @return array<string, mixed> {"ok": true}
	 * @throws SidecarException
	 * @throws InvalidInputException
	 */
	public function invalidateFact(string $uid, int $id): array {
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->postJson(SidecarClient::userPath($uid, 'memory/facts/' . self::factId($id) . '/invalidate'));
	}

	/**
	 * @return array<string, mixed> {"ok": true}
	 * @throws SidecarException
	 * @throws InvalidInputException
	 */
	public function deleteFact(string $uid, int $id): array {
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->deleteJson(SidecarClient::userPath($uid, 'memory/facts/' . self::factId($id)));
	}

	/**
	 * @return array<string, mixed> {"results": [...]}
	 * @throws SidecarException
	 * @throws InvalidInputException
	 */
	public function search(string $uid, string $query, int $limit): array {
		$query = trim($query);
		if ($query === '') {
			throw new InvalidInputException('say what to search for');
		}
		if (mb_strlen($query) > self::MAX_QUERY_CHARS) {
			throw new InvalidInputException(sprintf('the search may be at most %d characters', self::MAX_QUERY_CHARS));
		}
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->getJson(SidecarClient::userPath($uid, 'memory/search', ['q' => $query, 'limit' => self::clamp($limit, 1, 100)]));
	}

	private static function factId(int $id): int {
		if ($id <= 0) {
			throw new InvalidInputException('the fact id must be a positive number');
		}
		return $id;
	}

	private static function clamp(int $value, int $min, int $max): int {
		return max($min, min($max, $value));
	}
}
