<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\IstotaFault\Listener;

use OCP\EventDispatcher\Event;
use OCP\EventDispatcher\IEventListener;
use OCP\IAppConfig;
use OCP\User\Events\BeforeUserCreatedEvent;
use OCP\User\Events\UserChangedEvent;
use OCP\User\Events\UserCreatedEvent;

/**
 * Throws when the event is the step `fail_at` names:
 *   before_user_created  the user backend refuses (no account is made)
 *   user_created         the account is made, then a hook fails (what was seen in the field)
 *   user_changed         setting the display name fails
 *   bot_install          Talk's registration fails
 *
 * @template-implements IEventListener<Event>
 */
class FailingListener implements IEventListener {
	public function __construct(
		private readonly IAppConfig $config,
	) {
	}

	public function handle(Event $event): void {
		$step = match (true) {
			$event instanceof BeforeUserCreatedEvent => 'before_user_created',
			$event instanceof UserCreatedEvent => 'user_created',
			$event instanceof UserChangedEvent => 'user_changed',
			is_a($event, 'OCA\Talk\Events\BotInstallEvent') => 'bot_install',
			default => '',
		};
		if ($step !== '' && $this->config->getValueString('istotafault', 'fail_at', '') === $step) {
			throw new \RuntimeException('istotafault: injected failure at ' . $step);
		}
	}
}
