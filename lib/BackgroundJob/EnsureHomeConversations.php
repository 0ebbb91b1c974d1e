<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\BackgroundJob;

use OCA\Istota\Service\HomeConversation;
use OCP\AppFramework\Utility\ITimeFactory;
use OCP\BackgroundJob\QueuedJob;

/**
 * EnsureHomeConversations gives users their conversation with the bot outside the request
 * that made them eligible: every user (argument null) after the sidecar started or the
 * admin changed who may use the bot, one user (argument {"uid": …}) when they were created
 * or added to a group. Idempotent, so a job queued twice only costs a few calls.
 */
class EnsureHomeConversations extends QueuedJob {
	public function __construct(
		ITimeFactory $time,
		private readonly HomeConversation $home,
	) {
		parent::__construct($time);
	}

	protected function run($argument): void {
		$uid = is_array($argument) ? ($argument['uid'] ?? null) : null;
		if (is_string($uid) && $uid !== '') {
			$this->home->ensure($uid);
			return;
		}
		$this->home->ensureAll();
	}
}
