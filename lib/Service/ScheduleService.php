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
 * ScheduleService is the personal page's "Scheduled jobs" area: the user's CRON.md jobs,
 * heartbeat checks and briefings with their state and file problems, and enabling,
 * disabling or running one of their jobs now.
 */
class ScheduleService {
	public const JOB_ACTIONS = ['enable', 'disable', 'run'];
	/** Job names come from CRON.md; anything longer is not a name the sidecar holds. */
	private const MAX_JOB_NAME_BYTES = 200;

	public function __construct(
		private readonly SidecarClient $client,
		private readonly SessionService $sessions,
	) {
	}

	/**
	 * @return array<string, mixed> {"jobs", "cron_file", "checks", "heartbeat_file", "briefings", "briefings_file"}
	 * @throws SidecarException
	 */
	public function schedule(string $uid): array {
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->getJson(SidecarClient::userPath($uid, 'schedule'));
	}

	/**
	 * @return array<string, mixed> the job as it is now
	 * @throws SidecarException
	 * @throws InvalidInputException
	 */
	public function jobAction(string $uid, string $name, string $action): array {
		if (!in_array($action, self::JOB_ACTIONS, true)) {
			throw new InvalidInputException('the action must be enable, disable or run');
		}
		if ($name === '' || strlen($name) > self::MAX_JOB_NAME_BYTES || !mb_check_encoding($name, 'UTF-8')) {
			throw new InvalidInputException('no such job name');
		}
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->postJson(SidecarClient::userPath($uid, 'schedule/jobs/' . rawurlencode($name) . '/' . $action));
	}
}
