<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Listener;

use OCA\Istota\BackgroundJob\EnsureHomeConversations;
use OCP\BackgroundJob\IJobList;
use OCP\EventDispatcher\Event;
use OCP\EventDispatcher\IEventListener;
use OCP\Group\Events\UserAddedEvent;
use OCP\User\Events\UserCreatedEvent;

/**
 * UserEligibilityListener notices a user who may have become allowed to use the bot (a new
 * account, or one added to a group) and queues the check that gives them their
 * conversation. The check asks the sidecar, so it runs in a background job rather than
 * inside the admin's request.
 *
 * @template-implements IEventListener<Event>
 */
class UserEligibilityListener implements IEventListener {
	public function __construct(
		private readonly IJobList $jobs,
	) {
	}

	public function handle(Event $event): void {
		if (!$event instanceof UserCreatedEvent && !$event instanceof UserAddedEvent) {
			return;
		}
		$this->jobs->add(EnsureHomeConversations::class, ['uid' => $event->getUser()->getUID()]);
	}
}
