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
 * MeService is the personal page's "Status" area: who the user is to the sidecar, their
 * running, queued and recent tasks with usage, a task's progress events (the polling
 * fallback of the WebSocket) and stopping their work. The user id always comes from the
 * caller (the Nextcloud session), never from the browser.
 */
class MeService {
	public function __construct(
		private readonly SessionService $sessions,
		private readonly SidecarClient $client,
	) {
	}

	/**
	 * @return array{allowed: bool, istota_admin: bool, bot_name: string, files_path: string}
	 * @throws SidecarException
	 */
	public function me(string $uid): array {
		return $this->sessions->open($uid);
	}

	/**
	 * GET …/status, after making sure the sidecar knows the user.
	 *
	 * @return array<string, mixed>
	 * @throws SidecarException
	 */
	public function status(string $uid): array {
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->getJson(SidecarClient::userPath($uid, 'status'));
	}

	/**
	 * @return array<string, mixed> {"events": [...], "status": "..."}
	 * @throws SidecarException
	 * @throws InvalidInputException
	 */
	public function events(string $uid, int $taskId, int $after): array {
		if ($taskId <= 0) {
			throw new InvalidInputException('the task id must be a positive number');
		}
		if ($after < 0) {
			throw new InvalidInputException('"after" must not be negative');
		}
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->getJson(SidecarClient::userPath($uid, 'tasks/' . $taskId . '/events', ['after' => $after]));
	}

	/**
	 * @return array<string, mixed> {"stopped": n, "dropped": n}
	 * @throws SidecarException
	 */
	public function stop(string $uid): array {
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->postJson(SidecarClient::userPath($uid, 'stop'));
	}
}
